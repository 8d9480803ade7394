// Durations as muster's command lines, rdzv-conf and environment variables
// take them: the one parser of the tree (the launcher's flags, rdzv-conf,
// musterd's --heartbeat-timeout and doctor's --timeout all go through it), so
// that "0.5", "500ms" and "1m30s" mean the same everywhere.
#ifndef MUSTER_COMMON_DURATION_H_
#define MUSTER_COMMON_DURATION_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace muster {

// Parses a plain number of seconds, torchrun's way ("30", "0.5", "1e-3"), or
// an absl duration with units ("500ms", "2m", "1m30s", "1.5h"). White space
// around it is ignored.
// Returns INVALID_ARGUMENT ("expected seconds (30, 0.5) or a duration (500ms,
// 2m)") for anything else, and for a negative, NaN or infinite ("inf")
// value. A number too large for absl::Duration (1e300) saturates to
// absl::InfiniteDuration(), which a DurationRange with a finite max refuses.
// Pure; thread-safe.
absl::StatusOr<absl::Duration> ParseDuration(absl::string_view text);

// Inclusive bounds on a duration. Every duration setting has some: a heartbeat
// every nanosecond, or a timeout of a century, is a typo rather than a choice.
struct DurationRange {
  absl::Duration min = absl::ZeroDuration();
  absl::Duration max = absl::InfiniteDuration();
  // 0 is accepted even when below `min`: settings where 0 means "at once" or
  // "off" (last_call_timeout=0, --worker-timeout=0).
  bool zero_ok = false;

  bool Contains(absl::Duration d) const;
  // What Contains accepts, in the words of an error message: "seconds from
  // 10ms to 1m", "0 or seconds from 10ms to 168h", "seconds >= 0".
  std::string Describe() const;
};

// ParseDuration, then `range`. Returns INVALID_ARGUMENT as ParseDuration, or
// OUT_OF_RANGE ("out of range: expected seconds from 10ms to 1m") for a
// duration outside `range`: the two codes let a caller phrase its own message
// for each. Pure; thread-safe.
absl::StatusOr<absl::Duration> ParseDurationInRange(absl::string_view text,
                                                    const DurationRange& range);

}  // namespace muster

#endif  // MUSTER_COMMON_DURATION_H_
