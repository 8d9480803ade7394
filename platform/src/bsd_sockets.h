// The BSD-socket code that posix/socket.cc and windows/socket_windows.cc
// share word for word: resolution, the addresses a connect tries, the port a
// listener got, PollSet's wait around the OS's poll. Both Winsock and POSIX
// spell these types the same way, so one copy serves both; it is a header
// because the OS's own socket headers differ (include it after them). Private
// to platform.
#ifndef MUSTER_PLATFORM_SRC_BSD_SOCKETS_H_
#define MUSTER_PLATFORM_SRC_BSD_SOCKETS_H_

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "platform/src/socket_os.h"

namespace muster::platform::internal {

// host:port's addresses, in getaddrinfo's order, labelled host:port; `host`
// numeric unless `names`; `passive` for a listener. `error_text` names
// getaddrinfo's error code. Errors: FAILED_PRECONDITION "<what>: cannot use
// address ...".
inline absl::StatusOr<std::vector<TcpAddress>> ResolveAddresses(
    const std::string& host, int port, bool passive, bool names,
    const std::string& what, std::string (*error_text)(int)) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = (names ? 0 : AI_NUMERICHOST) | (passive ? AI_PASSIVE : 0);
  addrinfo* list = nullptr;
  const int rv =
      getaddrinfo(host.c_str(), absl::StrCat(port).c_str(), &hints, &list);
  if (rv != 0 || list == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": cannot use address '", host, "': ", error_text(rv)));
  }
  std::vector<TcpAddress> out;
  for (const addrinfo* a = list; a != nullptr; a = a->ai_next) {
    out.push_back({std::string(reinterpret_cast<const char*>(a->ai_addr),
                               static_cast<size_t>(a->ai_addrlen)),
                   absl::StrCat(host, ":", port)});
  }
  freeaddrinfo(list);
  return out;
}

// `address` as the OS's bind and connect take it.
struct Sockaddr {
  explicit Sockaddr(const TcpAddress& address)
      : len(static_cast<socklen_t>(
            std::min(address.sockaddr.size(), sizeof(sockaddr_storage)))) {
    std::memcpy(&ss, address.sockaddr.data(), len);
  }
  int family() const { return ss.ss_family; }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&ss); }

  sockaddr_storage ss{};
  socklen_t len;
};

// The port a bound IPv4 or IPv6 socket got, in host order (`Native`: the OS's
// socket type).
template <typename Native>
int BoundPort(Native socket) {
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(socket, reinterpret_cast<sockaddr*>(&bound), &len);
  return ntohs(bound.ss_family == AF_INET6
                   ? reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port
                   : reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
}

}  // namespace muster::platform::internal

namespace muster::platform {

template <typename PollFd, typename Poll>
absl::StatusOr<int> PollSet::WaitWith(int timeout_ms, const PollBits& bits,
                                      Poll poll) {
  // One array per thread, kept between calls: no allocation per wait.
  thread_local std::vector<PollFd> fds;
  fds.resize(entries_.size());
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    fds[i] = PollFd{};
    fds[i].fd = static_cast<decltype(fds[i].fd)>(e.handle);
    fds[i].events = static_cast<decltype(fds[i].events)>(
        ((e.events & kRead) ? bits.in : 0) |
        ((e.events & kWrite) ? bits.out : 0));
  }
  bool interrupted = false;
  std::string error;
  const int rv = poll(fds, timeout_ms, &interrupted, &error);
  if (rv < 0) return WaitFailed(interrupted, error);
  for (size_t i = 0; i < entries_.size(); ++i) {
    const int r = fds[i].revents;
    SetResult(i, (r & bits.in) != 0, (r & bits.out) != 0,
              (r & bits.failed) != 0);
  }
  return rv;
}

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_SRC_BSD_SOCKETS_H_
