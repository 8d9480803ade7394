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

namespace internal {

IoResult IoResultOf(int64_t r, bool receive, int error, bool again) {
  IoResult out;
  if (r > 0) {
    out.bytes = static_cast<size_t>(r);
  } else if (r == 0 && receive) {
    out.kind = IoResult::kClosed;
  } else if (r == 0 || again) {
    out.kind = IoResult::kWouldBlock;
  } else {
    out.kind = IoResult::kError;
    out.error = error;
  }
  return out;
}

}  // namespace internal

void Socket::Close() {
  if (handle_ != kNoSocket)
    internal::CloseSocket(std::exchange(handle_, kNoSocket));
}

void Socket::Shutdown() const {
  if (handle_ != kNoSocket) internal::ShutdownSocket(handle_);
}

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

void PollSet::SetResult(size_t i, bool in, bool out, bool failed) {
  Entry& e = entries_[i];
  e.readable = (e.events & kRead) && (in || failed);
  e.writable = (e.events & kWrite) && (out || failed);
}

absl::StatusOr<int> PollSet::WaitFailed(bool interrupted,
                                        const std::string& why) {
  for (Entry& e : entries_) e.readable = e.writable = false;
  if (interrupted) return 0;
  return absl::UnavailableError(why);
}

int PollMs(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(
      absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))),
      1000 * 60));
}

absl::StatusOr<Socket> ListenTcp(const std::string& ip, int backlog, int* port,
                                 const std::string& what) {
  absl::StatusOr<std::vector<internal::TcpAddress>> addresses =
      internal::ResolveTcp(ip, 0, /*passive=*/true, /*names=*/false, what);
  if (!addresses.ok()) return addresses.status();
  absl::StatusOr<Socket> listener =
      internal::ListenAddress(addresses->front(), backlog, port);
  if (!listener.ok()) {
    return absl::UnavailableError(absl::StrCat(
        what, ": cannot listen on ", ip, ": ", listener.status().message()));
  }
  return listener;
}

absl::StatusOr<Socket> ConnectTcp(const std::string& ip, int port,
                                  absl::Time deadline,
                                  const std::string& what) {
  absl::StatusOr<std::vector<internal::TcpAddress>> addresses =
      internal::ResolveTcp(ip, port, /*passive=*/false, /*names=*/false, what);
  if (!addresses.ok()) return addresses.status();
  return internal::ConnectAddress(addresses->front(), deadline, what);
}

absl::StatusOr<Socket> ConnectTcpBlocking(const std::string& host, int port,
                                          absl::Time deadline,
                                          const std::string& what) {
  absl::StatusOr<std::vector<internal::TcpAddress>> addresses =
      internal::ResolveTcp(host, port, /*passive=*/false, /*names=*/true, what);
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
