// The parts of SystemNet() that Linux and Windows share, since both speak BSD
// sockets and getaddrinfo: socket address text, and name resolution with a
// deadline. Private to platform/ (posix/net_*.cc, windows/net_*.cc); the only
// file outside posix/ and windows/ that includes a socket header, one per OS.
#ifndef MUSTER_PLATFORM_SRC_NET_COMMON_H_
#define MUSTER_PLATFORM_SRC_NET_COMMON_H_

#ifdef _WIN32
// clang-format off
#include <winsock2.h>
#include <ws2tcpip.h>
// clang-format on
#else
#include <sys/socket.h>
#endif

#include <string>

#include "absl/time/time.h"
#include "muster/platform/net.h"

namespace muster::platform::net_internal {

// The numeric text of an IPv4 or IPv6 socket address; "" for others.
std::string SockaddrToString(const sockaddr* sa);
// Fills `ss` from numeric `address` and `port`; false when not numeric.
bool ToSockaddr(const std::string& address, int port, sockaddr_storage* ss,
                socklen_t* len);

// Resolves `host` with getaddrinfo (Winsock must be started on Windows): a
// numeric address at once, a name on a detached thread, so that a slow
// resolver cannot hold the caller past `timeout` (absl::InfiniteDuration()
// waits); then timed_out is set, with EAI_AGAIN. Thread-safe.
Resolution ResolveHost(const std::string& host, absl::Duration timeout);

}  // namespace muster::platform::net_internal

#endif  // MUSTER_PLATFORM_SRC_NET_COMMON_H_
