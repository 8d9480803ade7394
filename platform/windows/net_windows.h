// The pieces of the Windows Net (platform/include/muster/platform/net.h), as
// on Linux one file a concern: interfaces, routes, addresses and the TCP
// table (net_windows.cc), resolution, connects and binds
// (net_connect_windows.cc). Private to platform/windows.
#ifndef MUSTER_PLATFORM_WINDOWS_NET_WINDOWS_H_
#define MUSTER_PLATFORM_WINDOWS_NET_WINDOWS_H_

#include <winsock2.h>
#include <ws2tcpip.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "muster/platform/net.h"
#include "platform/src/net_common.h"

namespace muster::platform::windows {

// WSAStartup, once per process (never cleaned up: sockets may be used until
// exit). False when Winsock cannot start; every socket call then fails.
bool EnsureWinsock();

// net.h speaks <cerrno> names: a Winsock error (WSAECONNREFUSED ...) as the
// errno value MinGW's <errno.h> gives the same condition (ECONNREFUSED).
int ErrnoFromWinsock(int wsa_error);

// Socket address text (platform/src/net_common.cc, shared with Linux).
using net_internal::SockaddrToString;
using net_internal::ToSockaddr;

// SystemNet() on Windows. Stateless, so thread-safe.
class WindowsNet final : public Net {
 public:
  // net_windows.cc
  std::vector<InterfaceAddress> Interfaces() override;
  std::string Hostname() override;
  std::string RouteSource(const std::string& address) override;
  std::vector<TcpSocket> TcpSockets(const std::vector<int>& ports) override;
  // net_connect_windows.cc
  Resolution Resolve(const std::string& host, absl::Duration timeout) override;
  int TryBind(const std::string& address, int port,
              bool reuse_address) override;
  absl::StatusOr<int> PickFreePort(const std::string& host) override;
  ConnectAttempt Connect(const std::string& address, int port,
                         absl::Time deadline) override;
};

}  // namespace muster::platform::windows

#endif  // MUSTER_PLATFORM_WINDOWS_NET_WINDOWS_H_
