#include "platform/src/line_splitter.h"

#include <algorithm>

namespace muster::platform::internal {

LineSplitter::LineSplitter(size_t max_line)
    : max_line_(std::max<size_t>(max_line, 1)) {}

void LineSplitter::Feed(absl::string_view data, Emit emit) {
  while (!data.empty()) {
    const size_t nl = data.find('\n');
    if (nl == absl::string_view::npos) {
      // No line end in this chunk: keep it, but never more than max_line_
      // bytes.
      while (pending_.size() + data.size() > max_line_) {
        const size_t take = max_line_ - pending_.size();
        if (pending_.empty()) {
          emit(data.substr(0, take), false);
        } else {
          pending_.append(data.data(), take);
          emit(pending_, false);
          pending_.clear();
        }
        data.remove_prefix(take);
      }
      pending_.append(data.data(), data.size());
      return;
    }
    absl::string_view line = data.substr(0, nl);
    data.remove_prefix(nl + 1);
    // A long line completed here still goes out in max_line_ pieces, the last
    // with its '\n'.
    while (pending_.size() + line.size() > max_line_) {
      const size_t take = max_line_ - pending_.size();
      if (pending_.empty()) {
        emit(line.substr(0, take), false);
      } else {
        pending_.append(line.data(), take);
        emit(pending_, false);
        pending_.clear();
      }
      line.remove_prefix(take);
    }
    if (pending_.empty()) {
      emit(line, true);  // the common case: no copy
    } else {
      pending_.append(line.data(), line.size());
      emit(pending_, true);
      pending_.clear();
    }
  }
}

void LineSplitter::Flush(Emit emit) {
  if (pending_.empty()) return;
  emit(pending_, false);
  pending_.clear();
}

}  // namespace muster::platform::internal
