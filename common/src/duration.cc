#include "muster/common/duration.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace muster {

absl::StatusOr<absl::Duration> ParseDuration(absl::string_view text) {
  const absl::string_view t = absl::StripAsciiWhitespace(text);
  double seconds = 0;
  // A number first: absl::ParseDuration reads "30" as an error (no unit) and
  // torchrun users write seconds.
  if (absl::SimpleAtod(t, &seconds)) {
    // A finite number so large that absl saturates it (1e300) is infinite;
    // a finite DurationRange::max refuses it as out of range.
    if (std::isfinite(seconds) && seconds >= 0) return absl::Seconds(seconds);
  } else if (absl::Duration d; absl::ParseDuration(t, &d) &&
                               d >= absl::ZeroDuration() &&
                               d != absl::InfiniteDuration()) {
    return d;
  }
  return absl::InvalidArgumentError(
      "expected seconds (30, 0.5) or a duration (500ms, 2m)");
}

bool DurationRange::Contains(absl::Duration d) const {
  if (zero_ok && d == absl::ZeroDuration()) return true;
  return d >= min && d <= max;
}

std::string DurationRange::Describe() const {
  const char* zero = zero_ok && min > absl::ZeroDuration() ? "0 or " : "";
  if (max == absl::InfiniteDuration()) {
    return absl::StrCat(zero, "seconds >= ", absl::FormatDuration(min));
  }
  return absl::StrCat(zero, "seconds from ", absl::FormatDuration(min), " to ",
                      absl::FormatDuration(max));
}

absl::StatusOr<absl::Duration> ParseDurationInRange(
    absl::string_view text, const DurationRange& range) {
  absl::StatusOr<absl::Duration> d = ParseDuration(text);
  if (!d.ok()) return d.status();
  if (!range.Contains(*d)) {
    return absl::OutOfRangeError(
        absl::StrCat("out of range: expected ", range.Describe()));
  }
  return *d;
}

}  // namespace muster
