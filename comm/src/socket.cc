// The portable parts of comm/src/socket.h; the OS calls are in
// posix/socket_posix.cc.
#include "comm/src/socket.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"

namespace muster::comm::internal {

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    Close();
    handle_ = other.Release();
  }
  return *this;
}

SocketHandle Socket::Release() { return std::exchange(handle_, kNoSocket); }

size_t PollSet::Add(SocketHandle handle, uint8_t events) {
  entries_.push_back(Entry{handle, events, false, false});
  return entries_.size() - 1;
}

void PollSet::MarkAllReady() {
  for (Entry& e : entries_) {
    e.readable = (e.events & kRead) != 0;
    e.writable = (e.events & kWrite) != 0;
  }
}

int PollMs(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(
      absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))),
      1000 * 60));
}

}  // namespace muster::comm::internal
