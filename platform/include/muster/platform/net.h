// Network facts of this host, behind one interface: interfaces and their
// addresses, the route to a peer, who holds a TCP port, whether a port can be
// bound, name resolution with a deadline, and one TCP connect attempt with
// what came back (reset, ICMP, silence). The Linux implementation is
// posix/net_*.cc; FakeNet (fake/fake_net.h) serves tests with hand-made
// facts. Portable logic built on these (probe classification, the advertised
// address, `muster doctor`'s checks) lives outside platform/.
//
// Error codes are errno values as <cerrno> names them (ECONNREFUSED,
// ETIMEDOUT, EADDRINUSE ...); an implementation for another OS maps its own
// codes onto them.
#ifndef MUSTER_PLATFORM_NET_H_
#define MUSTER_PLATFORM_NET_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace muster::platform {

enum class IpFamily { kIpv4, kIpv6 };

// One address of one interface, in the system's order (Linux lists every IPv4
// address before the IPv6 ones).
struct InterfaceAddress {
  std::string name;  // "eth0"
  IpFamily family = IpFamily::kIpv4;
  std::string address;   // numeric text: "10.0.0.5", "fd00::2"
  int prefix_len = 0;    // bits of the netmask
  bool up = false;       // administratively up
  bool running = false;  // up with a carrier
  bool loopback = false;
};

// An IP address as bytes in network order: 4 for IPv4, 16 for IPv6.
struct IpBytes {
  IpFamily family = IpFamily::kIpv4;
  std::array<uint8_t, 16> bytes{};
  int size() const { return family == IpFamily::kIpv4 ? 4 : 16; }
};
// Parses numeric IPv4 or IPv6 text; nullopt for anything else (names,
// brackets). Pure; thread-safe.
std::optional<IpBytes> ParseIpAddress(absl::string_view text);
// The port of a TCP service name ("ssh" -> 22) from the system's services
// database; nullopt when unknown. Thread-safe.
std::optional<int> TcpServicePort(absl::string_view name);
// Whether `text` is an IPv4 127/8 address or ::1.
bool IsLoopbackAddress(absl::string_view text);

// One TCP socket of this network namespace.
struct TcpSocket {
  std::string state;  // LISTEN, ESTABLISHED, TIME_WAIT ...
  std::string local;  // "127.0.0.1:8080", "[::]:29400"
  std::string remote;
  int local_port = 0;
  int pid = 0;          // the process holding it; 0 when not visible
  std::string command;  // its command line, words joined by spaces
};

// What a name resolves to.
struct Resolution {
  bool ok = false;
  bool timed_out = false;  // the resolver did not answer within the timeout
  std::string error;       // why not, with the resolver's code name
                           // ("EAI_NONAME: no such name")
  std::string message;     // the resolver's own message for the code
  std::vector<std::string> addresses;  // distinct, in the resolver's order
};

// What one TCP connect attempt saw.
struct ConnectAttempt {
  bool connected = false;
  bool timed_out = false;      // nothing came back before the deadline
  bool socket_failed = false;  // no socket could be made (`error` says why)
  int error = 0;  // errno of the failed connect (0 when connected/timed out)
  // The ICMP error that ended the connect, if one came back.
  bool icmp = false;
  bool icmp_v6 = false;
  int icmp_type = -1;
  int icmp_code = -1;
  std::string icmp_source;
  bool local_error = false;  // raised by this host's own stack, no ICMP
  // On a timeout to an IPv4 address: its ARP state on the local link,
  // "complete", "incomplete" (asked, never answered) or "" (not asked).
  std::string arp_state;
};

// The host's network, as the OS reports it. Thread-safe: every method may be
// called from any thread (the system implementation keeps no state).
class Net {
 public:
  virtual ~Net() = default;

  // Every IPv4/IPv6 address of every interface. Empty when the OS refuses.
  virtual std::vector<InterfaceAddress> Interfaces() = 0;
  // This machine's host name; "localhost" when the OS gives none.
  virtual std::string Hostname() = 0;
  // Resolves `host` (a name or a numeric address; no brackets). A numeric
  // host never blocks; a name is looked up so that a slow resolver cannot
  // hold the caller past `timeout` (absl::InfiniteDuration() waits).
  virtual Resolution Resolve(const std::string& host,
                             absl::Duration timeout) = 0;
  // The local address the kernel would use to reach numeric `address` (no
  // packet is sent); "" when there is no route.
  virtual std::string RouteSource(const std::string& address) = 0;
  // The TCP sockets whose local port is one of `ports` (all of them when
  // `ports` is empty), each with its owner when the OS lets us see it.
  // Blocks for a scan of the process table (tens of milliseconds).
  virtual std::vector<TcpSocket> TcpSockets(const std::vector<int>& ports) = 0;
  // Binds TCP `port` on numeric `address` and releases it at once; 0 when it
  // could be bound, else the errno (EADDRINUSE, EADDRNOTAVAIL, EACCES...).
  // `reuse_address`: as a server would, with SO_REUSEADDR.
  virtual int TryBind(const std::string& address, int port,
                      bool reuse_address) = 0;
  // Binds an ephemeral TCP port on `host` ("0.0.0.0" when not numeric IPv4)
  // and returns its number, released. UNAVAILABLE when nothing can be bound.
  virtual absl::StatusOr<int> PickFreePort(const std::string& host) = 0;
  // One TCP connect to numeric `address`:`port`, given up at `deadline`.
  virtual ConnectAttempt Connect(const std::string& address, int port,
                                 absl::Time deadline) = 0;
};

// This machine's network (posix/ on Linux). Never null; lives for the
// process.
Net& SystemNet();

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_NET_H_
