// A TCP connection probe that names why a connection fails: nothing listening,
// a firewall that drops or rejects, no route, or a name that does not resolve.
// `muster doctor` and the round preflight rest on it.
//
//   ProbeResult r = ProbeTcp("node1", 29400, absl::Seconds(2));
//   if (r.outcome != ProbeOutcome::kOpen) {
//     std::cerr << r.Explain() << "\n" << r.Fix() << "\n";
//   }
//
// The connect itself is platform::Net::Connect (muster/platform/net.h); this
// file classifies what it saw.
//
// How each outcome is told (Linux; the socket has IP_RECVERR/IPV6_RECVERR set,
// so an ICMP error that ends the connect leaves its type, code and sender in
// the socket's error queue):
//
//   kOpen         the handshake completed.
//   kRefused      ECONNREFUSED with no ICMP in the error queue: a TCP reset
//                 came back. The host is up and nothing listens on the port,
//                 or a firewall rule answers with `--reject-with tcp-reset`;
//                 the two look exactly alike on the wire.
//   kFiltered     no SYN-ACK, reset or ICMP before the timeout: a firewall
//                 DROP (iptables/nftables, Windows Defender Firewall, a cloud
//                 security group), an address nobody owns, or a host that is
//                 down. When the target is on the local link and answered ARP,
//                 the host is up and the SYN was dropped (`detail` says so).
//   kRejected     ICMP that only a firewall sends for TCP: port-unreachable
//                 (iptables' and nftables' default REJECT; a closed TCP port
//                 answers with a reset, never with this), protocol-
//                 unreachable, net/host/communication administratively
//                 prohibited (type 3 codes 9, 10, 13; ICMPv6 admin-prohibited,
//                 policy-fail, reject-route), or net/host-unreachable sent by
//                 the target host itself about itself. Also EACCES/EPERM from
//                 connect (a local `prohibit` route or a security module).
//   kUnreachable  ENETUNREACH/EHOSTUNREACH from the local routing table (no
//                 route, an `unreachable` route, an interface down), ICMP
//                 net/host-unreachable or time-exceeded from a router, or a
//                 target on the local link that never answered ARP.
//   kDnsFailure   getaddrinfo failed or did not answer within the timeout.
//                 EINVAL from connect means a `blackhole` route here.
//   kError        anything else (bad port, no sockets left).
//
// What cannot be told apart: a closed port and `REJECT --reject-with
// tcp-reset` (both send a reset); a DROP and a host that is down or an address
// nobody owns behind a router (all are silence); a REJECT with
// icmp-host-unreachable sent by a router in front of the target and a real
// routing failure there. A target that rate-limits its ICMP (Linux sends at
// most about one per second per destination after a burst of six) may answer
// a REJECT only to the SYN retransmitted a second later; a timeout below
// about 1.5 s can then report kFiltered for a REJECT.
#ifndef MUSTER_COMMON_PROBE_H_
#define MUSTER_COMMON_PROBE_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace muster {
namespace platform {
class Net;
}  // namespace platform

enum class ProbeOutcome {
  kOpen,
  kRefused,      // nothing listening (a TCP reset came back)
  kFiltered,     // timeout: firewall DROP, wrong address, security group
  kRejected,     // ICMP admin-prohibited / port-unreachable: a REJECT rule
  kUnreachable,  // no route, net/host unreachable
  kDnsFailure,
  kError,
};

// "open", "refused", "filtered", "rejected", "unreachable", "dns-failure",
// "error".
absl::string_view ProbeOutcomeName(ProbeOutcome outcome);

struct ProbeResult {
  ProbeOutcome outcome = ProbeOutcome::kError;
  std::string host;  // as given
  int port = 0;
  std::string resolved_address;  // the address the outcome is about
  absl::Duration elapsed;        // resolution and connects together
  std::string detail;            // errno text, ICMP type and sender, ARP state

  // The evidence behind `outcome`, for programs: the connect's errno (0 when
  // open or timed out), and the ICMP error that ended it, if one came back
  // (type and code as on the wire, -1 when none; the sender's address).
  int error_code = 0;
  int icmp_type = -1;
  int icmp_code = -1;
  bool icmp_v6 = false;
  std::string icmp_source;
  bool icmp_from_this_host = false;  // the ICMP came from one of our addresses

  // One sentence naming the likely cause, with host, port and evidence.
  std::string Explain() const;
  // What to do about it, in one or two sentences (generic: `muster doctor`
  // adds the exact firewall command for the platform).
  std::string Fix() const;
};

// Connects to host:port over TCP and classifies the outcome (see above). The
// name is resolved first (up to `timeout`; a name that does not answer in
// time is kDnsFailure); then each resolved address is tried in getaddrinfo's
// order, at most four, until one is open, all sharing one `timeout`. The
// result is the open address's, else the first address's (its `detail` lists
// the others). Blocks at most about 2 x timeout. Never throws; thread-safe
// (no shared state). A DNS lookup that outlives its deadline finishes on a
// detached thread.
ProbeResult ProbeTcp(const std::string& host, int port, absl::Duration timeout);
// The same through `net` (a FakeNet in tests); the one above uses
// platform::SystemNet().
ProbeResult ProbeTcp(platform::Net& net, const std::string& host, int port,
                     absl::Duration timeout);

}  // namespace muster

#endif  // MUSTER_COMMON_PROBE_H_
