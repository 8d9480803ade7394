// The pieces of the Linux Net (platform/include/muster/platform/net.h), one
// file a concern: interfaces and routes (net_interfaces.cc), sockets and
// ports (net_sockets.cc), resolution and connects (net_connect.cc).
#ifndef MUSTER_PLATFORM_POSIX_NET_POSIX_H_
#define MUSTER_PLATFORM_POSIX_NET_POSIX_H_

#include <sys/socket.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "muster/platform/net.h"
#include "platform/src/net_common.h"

namespace muster::platform::posix {

// Socket address text (platform/src/net_common.cc, shared with Windows).
using net_internal::SockaddrToString;
using net_internal::ToSockaddr;

std::vector<InterfaceAddress> Interfaces();
std::string Hostname();
std::string RouteSource(const std::string& address);

std::vector<TcpSocket> TcpSockets(const std::vector<int>& ports);
int TryBind(const std::string& address, int port, bool reuse_address);
absl::StatusOr<int> PickFreePort(const std::string& host);

Resolution Resolve(const std::string& host, absl::Duration timeout);
ConnectAttempt Connect(const std::string& address, int port,
                       absl::Time deadline);

}  // namespace muster::platform::posix

#endif  // MUSTER_PLATFORM_POSIX_NET_POSIX_H_
