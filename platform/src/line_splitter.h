// LineSplitter: turns a byte stream read in arbitrary chunks into whole lines,
// so that the agent can write each line of a worker with one write() and lines
// of different workers never interleave mid-line. Private to platform.
#ifndef MUSTER_PLATFORM_SRC_LINE_SPLITTER_H_
#define MUSTER_PLATFORM_SRC_LINE_SPLITTER_H_

#include <cstddef>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"

namespace muster::platform::internal {

// Not thread-safe: one splitter per stream, used by one reader.
class LineSplitter {
 public:
  // Called with a line's text (without its '\n') and whether it ended with a
  // '\n' (false for a piece of an over-long line and for a partial last line
  // flushed at EOF).
  using Emit = absl::FunctionRef<void(absl::string_view text, bool newline)>;

  // A line longer than `max_line` bytes is emitted in pieces of `max_line`
  // bytes, so that a worker printing without newlines cannot make the agent
  // buffer without bound.
  explicit LineSplitter(size_t max_line = 64 * 1024);

  // Emits every line that `data` completes. Keeps the unfinished rest for the
  // next call.
  void Feed(absl::string_view data, Emit emit);

  // Emits the unfinished rest, if any (at EOF).
  void Flush(Emit emit);

  // Bytes held back, waiting for their '\n'.
  size_t pending() const { return pending_.size(); }

 private:
  const size_t max_line_;
  std::string pending_;
};

}  // namespace muster::platform::internal

#endif  // MUSTER_PLATFORM_SRC_LINE_SPLITTER_H_
