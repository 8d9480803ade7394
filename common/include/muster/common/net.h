// Addresses, ports and host names, as the launcher and the daemon need them.
// The OS calls behind them are platform::SystemNet()'s
// (muster/platform/net.h); this layer holds the portable logic.
#ifndef MUSTER_COMMON_NET_H_
#define MUSTER_COMMON_NET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace muster {

struct HostPort {
  std::string
      host;  // A name, an IPv4 address, or an IPv6 address without brackets.
  int port = 0;
  // "host:port", with brackets around an IPv6 host; what gRPC takes as a
  // target.
  std::string ToString() const;
};

// Parses "host:port", "host" (port = default_port), "[v6]:port" or ":port"
// (host = ""). INVALID_ARGUMENT naming the text when the port is not a number
// in 1..65535 (0 allowed only when allow_zero_port, meaning "pick one"), or
// when default_port is < 0 and no port was given.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view text, int default_port,
                                       bool allow_zero_port = false);

// Parses a comma-separated list of rendezvous replicas, "H1:P1,H2:P2" (each
// entry as ParseHostPort, with default_port; white space around entries is
// ignored), keeping the order given. Every entry needs a host. Errors:
// INVALID_ARGUMENT naming the entry and the fix: an empty entry ("a,,b"), an
// entry without a host (":29400" in a list), a bad port, the same replica
// listed twice. A single entry gives a list of one.
absl::StatusOr<std::vector<HostPort>> ParseHostPortList(absl::string_view text,
                                                        int default_port);
// "H1:P1,H2:P2": the list as ParseHostPortList reads it back.
std::string JoinHostPorts(const std::vector<HostPort>& list);

// This machine's host name (gethostname). Never fails: "localhost" when the
// call does.
std::string LocalHostname();

// Whether `host` names this machine: a loopback address, "localhost", this host
// name, or an address of one of this machine's interfaces. Resolves names; does
// not block longer than DNS.
bool IsLocalHost(absl::string_view host);

// The address peers should use to reach this node: the first non-loopback IPv4
// address of an interface that is up, else the host name if it resolves to a
// non-loopback address, else 127.0.0.1. Never returns the 127.0.1.1 that Debian
// maps the host name to.
std::string DefaultAdvertisedAddress();

// Binds an ephemeral TCP port on `host` and returns its number, releasing it
// (as torchrun does for MASTER_PORT). The port may be taken by someone else
// before it is used again.
absl::StatusOr<int> PickFreePort(const std::string& host = "0.0.0.0");

// Whether something accepts TCP connections at host:port within `timeout`.
bool CanConnect(const std::string& host, int port, absl::Duration timeout);

// Describes who listens on a local TCP port ("pid 1234 (musterd --listen
// ...)"), from platform::Net::TcpSockets. Empty when it cannot tell.
std::string DescribePortOwner(int port);

}  // namespace muster

#endif  // MUSTER_COMMON_NET_H_
