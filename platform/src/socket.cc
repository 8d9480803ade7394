// The portable parts of muster/platform/socket.h (the connects over
// src/socket_os.h); the OS calls are in posix/socket.cc and
// windows/socket_windows.cc.
#include "muster/platform/socket.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "platform/src/socket_os.h"

namespace muster::platform {

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

absl::StatusOr<Socket> ConnectTcp(const std::string& ip, int port,
                                  absl::Time deadline,
                                  const std::string& what) {
  absl::StatusOr<std::vector<internal::TcpAddress>> addresses =
      internal::ResolveTcp(ip, port, /*names=*/false, what);
  if (!addresses.ok()) return addresses.status();
  return internal::ConnectAddress(addresses->front(), deadline, what);
}

absl::StatusOr<Socket> ConnectTcpBlocking(const std::string& host, int port,
                                          absl::Time deadline,
                                          const std::string& what) {
  absl::StatusOr<std::vector<internal::TcpAddress>> addresses =
      internal::ResolveTcp(host, port, /*names=*/true, what);
  if (!addresses.ok()) return addresses.status();
  absl::StatusOr<Socket> s =
      absl::UnavailableError(absl::StrCat(what, ": ", host, " has no address"));
  for (const internal::TcpAddress& address : *addresses) {
    s = internal::ConnectAddress(address, deadline, what);
    if (s.ok()) break;
  }
  if (s.ok()) {
    internal::MakeBlocking(
        *s, std::max(absl::Milliseconds(10), deadline - absl::Now()));
  }
  return s;
}

}  // namespace muster::platform
