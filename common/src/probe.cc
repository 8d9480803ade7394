#include "muster/common/probe.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "muster/platform/net.h"

namespace muster {
namespace {

constexpr int kMaxAddresses = 4;

std::string ErrnoName(int err) {
  switch (err) {
    case ECONNREFUSED:
      return "ECONNREFUSED";
    case ETIMEDOUT:
      return "ETIMEDOUT";
    case EHOSTUNREACH:
      return "EHOSTUNREACH";
    case ENETUNREACH:
      return "ENETUNREACH";
    case ENETDOWN:
      return "ENETDOWN";
#ifdef EHOSTDOWN  // not on Windows
    case EHOSTDOWN:
      return "EHOSTDOWN";
#endif
    case EACCES:
      return "EACCES";
    case EPERM:
      return "EPERM";
    case ENOPROTOOPT:
      return "ENOPROTOOPT";
    case EADDRNOTAVAIL:
      return "EADDRNOTAVAIL";
    case EINVAL:
      return "EINVAL";
#ifdef ENONET  // not on Windows
    case ENONET:
      return "ENONET";
#endif
    case EPROTO:
      return "EPROTO";
    default:
      return absl::StrCat("errno ", err);
  }
}

std::string ErrnoText(int err) {
  return absl::StrCat(ErrnoName(err), " (", std::strerror(err), ")");
}

std::string IcmpName(bool v6, int type, int code) {
  if (!v6 && type == 3) {
    static const char* const kNames[] = {
        "net-unreachable",           "host-unreachable",
        "protocol-unreachable",      "port-unreachable",
        "fragmentation-needed",      "source-route-failed",
        "network-unknown",           "host-unknown",
        "source-host-isolated",      "net-prohibited",
        "host-prohibited",           "net-unreachable-for-tos",
        "host-unreachable-for-tos",  "admin-prohibited",
        "host-precedence-violation", "precedence-cutoff",
    };
    if (code >= 0 && code < 16) {
      return absl::StrCat("ICMP ", kNames[code], " (type 3 code ", code, ")");
    }
  }
  if (!v6 && type == 11) {
    return absl::StrCat("ICMP time-exceeded (type 11 code ", code, ")");
  }
  if (v6 && type == 1) {
    static const char* const kNames[] = {
        "no-route",         "admin-prohibited",
        "beyond-scope",     "address-unreachable",
        "port-unreachable", "policy-fail",
        "reject-route",
    };
    if (code >= 0 && code < 7) {
      return absl::StrCat("ICMPv6 ", kNames[code], " (type 1 code ", code, ")");
    }
  }
  if (v6 && type == 3) {
    return absl::StrCat("ICMPv6 time-exceeded (type 3 code ", code, ")");
  }
  return absl::StrCat(v6 ? "ICMPv6" : "ICMP", " type ", type, " code ", code);
}

// Whether an ICMP error for a TCP SYN says that a firewall refused it.
// `from_target`: the ICMP came from the address we connected to.
bool IcmpIsRejection(bool v6, int type, int code, bool from_target) {
  if (!v6 && type == 3) {
    switch (code) {
      case 2:   // protocol-unreachable: every host speaks TCP
      case 3:   // port-unreachable: a closed TCP port sends a reset instead
      case 9:   // net-prohibited
      case 10:  // host-prohibited
      case 13:  // admin-prohibited
        return true;
      case 0:  // net/host-unreachable from the target itself about itself
      case 1:
        return from_target;
      default:
        return false;
    }
  }
  if (v6 && type == 1) {
    switch (code) {
      case 1:  // admin-prohibited
      case 4:  // port-unreachable
      case 5:  // policy-fail
      case 6:  // reject-route
        return true;
      case 0:
      case 3:
        return from_target;
      default:
        return false;
    }
  }
  return false;
}

struct IcmpError {
  bool present = false;
  bool local = false;  // raised by this host's stack
  bool v6 = false;
  int type = -1;
  int code = -1;
  std::string source;
  bool source_is_this_host = false;
};

// Whether `address` is one of this host's own interface addresses.
bool IsOwnAddress(platform::Net& net, const std::string& address) {
  if (address.empty()) return false;
  for (const platform::InterfaceAddress& i : net.Interfaces()) {
    if (i.address == address) return true;
  }
  return false;
}

struct AddressResult {
  ProbeOutcome outcome = ProbeOutcome::kError;
  std::string address;
  std::string detail;
  int error_code = 0;
  IcmpError icmp;
};

// The outcome of a failed connect with errno `err` and what the error queue
// held.
void Classify(int err, AddressResult* r) {
  r->error_code = err;
  const IcmpError& icmp = r->icmp;
  if (icmp.present) {
    const bool from_target = icmp.source == r->address;
    std::string who =
        icmp.source.empty()
            ? ""
            : absl::StrCat(" from ", icmp.source,
                           from_target                ? " (the target itself)"
                           : icmp.source_is_this_host ? " (this host)"
                                                      : "");
    r->detail = absl::StrCat(ErrnoText(err), "; ",
                             IcmpName(icmp.v6, icmp.type, icmp.code), who);
    r->outcome = IcmpIsRejection(icmp.v6, icmp.type, icmp.code, from_target)
                     ? ProbeOutcome::kRejected
                     : ProbeOutcome::kUnreachable;
    return;
  }
  r->detail = ErrnoText(err);
  switch (err) {
    case ECONNREFUSED:
      r->outcome = ProbeOutcome::kRefused;
      r->detail += "; a TCP reset came back, no ICMP";
      return;
    case ETIMEDOUT:
      r->outcome = ProbeOutcome::kFiltered;
      return;
    case ENETUNREACH:
    case EHOSTUNREACH:
    case ENETDOWN:
#ifdef EHOSTDOWN  // these two are Linux's (not on Windows)
    case EHOSTDOWN:
    case ENONET:
#endif
      r->outcome = ProbeOutcome::kUnreachable;
      r->detail += icmp.local ? "; raised by this host's network stack"
                              : "; from this host's routing table, no ICMP";
      return;
    case EINVAL:  // what connect returns on a 'blackhole' route
      r->outcome = ProbeOutcome::kUnreachable;
      r->detail += "; a 'blackhole' route on this host discards it";
      return;
    case EACCES:
    case EPERM:
      r->outcome = ProbeOutcome::kRejected;
      r->detail +=
          "; refused by this host before sending (a 'prohibit' route, a local "
          "firewall or a security module)";
      return;
    default:
      r->outcome = ProbeOutcome::kError;
      return;
  }
}

AddressResult ProbeAddress(platform::Net& net, const std::string& address,
                           int port, absl::Time deadline) {
  AddressResult r;
  r.address = address;
  const platform::ConnectAttempt a = net.Connect(address, port, deadline);
  if (a.socket_failed) {
    r.error_code = a.error;
    r.detail = absl::StrCat("socket(): ", ErrnoText(a.error));
    return r;
  }
  if (a.timed_out) {
    r.outcome = ProbeOutcome::kFiltered;
    r.detail = "no SYN-ACK, TCP reset or ICMP error came back";
    if (a.arp_state == "complete") {
      absl::StrAppend(&r.detail, "; ", r.address,
                      " is on the local link and answered ARP: the host "
                      "is up and the SYN was dropped");
    } else if (a.arp_state == "incomplete") {
      r.outcome = ProbeOutcome::kUnreachable;
      r.detail = absl::StrCat(
          "no answer to ARP for ", r.address,
          " on the local link: no host owns this address, or it is down");
    }
    return r;
  }
  if (a.connected) {
    r.outcome = ProbeOutcome::kOpen;
    r.detail = "connected";
    return r;
  }
  r.icmp.present = a.icmp;
  r.icmp.local = a.local_error;
  r.icmp.v6 = a.icmp_v6;
  r.icmp.type = a.icmp_type;
  r.icmp.code = a.icmp_code;
  r.icmp.source = a.icmp_source;
  r.icmp.source_is_this_host = IsOwnAddress(net, r.icmp.source);
  Classify(a.error, &r);
  return r;
}

}  // namespace

absl::string_view ProbeOutcomeName(ProbeOutcome outcome) {
  switch (outcome) {
    case ProbeOutcome::kOpen:
      return "open";
    case ProbeOutcome::kRefused:
      return "refused";
    case ProbeOutcome::kFiltered:
      return "filtered";
    case ProbeOutcome::kRejected:
      return "rejected";
    case ProbeOutcome::kUnreachable:
      return "unreachable";
    case ProbeOutcome::kDnsFailure:
      return "dns-failure";
    case ProbeOutcome::kError:
      return "error";
  }
  return "error";
}

ProbeResult ProbeTcp(const std::string& host, int port,
                     absl::Duration timeout) {
  return ProbeTcp(platform::SystemNet(), host, port, timeout);
}

ProbeResult ProbeTcp(platform::Net& net, const std::string& host_in, int port,
                     absl::Duration timeout) {
  const absl::Time start = absl::Now();
  ProbeResult result;
  result.host = host_in;
  result.port = port;
  std::string host = host_in;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (port < 1 || port > 65535) {
    result.outcome = ProbeOutcome::kError;
    result.detail = absl::StrCat("port ", port, " is not in 1..65535");
    result.elapsed = absl::Now() - start;
    return result;
  }
  if (host.empty()) {
    result.outcome = ProbeOutcome::kDnsFailure;
    result.detail = "empty host name";
    result.elapsed = absl::Now() - start;
    return result;
  }
  const platform::Resolution resolved = net.Resolve(host, timeout);
  std::vector<std::string> addresses = resolved.addresses;
  if (!resolved.ok || addresses.empty()) {
    result.outcome = ProbeOutcome::kDnsFailure;
    result.detail = resolved.ok ? "the name has no IPv4 or IPv6 address"
                    : resolved.timed_out
                        ? absl::StrCat("no answer from the resolver within ",
                                       absl::FormatDuration(timeout))
                        : resolved.error;
    result.elapsed = absl::Now() - start;
    return result;
  }
  if (addresses.size() > kMaxAddresses) addresses.resize(kMaxAddresses);

  const absl::Time deadline = absl::Now() + timeout;
  std::vector<AddressResult> tried;
  for (const std::string& addr : addresses) {
    if (!tried.empty() && absl::Now() >= deadline) break;
    tried.push_back(ProbeAddress(net, addr, port, deadline));
    if (tried.back().outcome == ProbeOutcome::kOpen) break;
  }
  const AddressResult& chosen =
      tried.back().outcome == ProbeOutcome::kOpen ? tried.back() : tried[0];
  result.outcome = chosen.outcome;
  result.resolved_address = chosen.address;
  result.detail = chosen.detail;
  result.error_code = chosen.error_code;
  if (chosen.icmp.present) {
    result.icmp_type = chosen.icmp.type;
    result.icmp_code = chosen.icmp.code;
    result.icmp_v6 = chosen.icmp.v6;
    result.icmp_source = chosen.icmp.source;
    result.icmp_from_this_host = chosen.icmp.source_is_this_host;
  }
  std::vector<std::string> others;
  for (const AddressResult& t : tried) {
    if (&t == &chosen) continue;
    others.push_back(absl::StrCat(t.address, " ", ProbeOutcomeName(t.outcome)));
  }
  if (!others.empty()) {
    absl::StrAppend(&result.detail, "; also tried ",
                    absl::StrJoin(others, ", "));
  }
  result.elapsed = absl::Now() - start;
  return result;
}

namespace {

std::string Target(const ProbeResult& r) {
  std::string where = r.host.find(':') != std::string::npos
                          ? absl::StrCat("[", r.host, "]:", r.port)
                          : absl::StrCat(r.host, ":", r.port);
  if (!r.resolved_address.empty() && r.resolved_address != r.host) {
    absl::StrAppend(&where, " (", r.resolved_address, ")");
  }
  return where;
}

std::string Millis(absl::Duration d) {
  return absl::StrCat(absl::ToInt64Milliseconds(d), " ms");
}

}  // namespace

std::string ProbeResult::Explain() const {
  const std::string t = Target(*this);
  switch (outcome) {
    case ProbeOutcome::kOpen:
      return absl::StrCat("Something accepts TCP connections at ", t, " (",
                          Millis(elapsed), ").");
    case ProbeOutcome::kRefused:
      return absl::StrCat(
          "Nothing listens at ", t,
          ": the host answered at once with a TCP reset, so it is up and no "
          "firewall dropped the connection, but no process accepts on port ",
          port,
          " at that address (a firewall rule with --reject-with tcp-reset "
          "looks the same).");
    case ProbeOutcome::kFiltered:
      if (detail.find("answered ARP") != std::string::npos) {
        return absl::StrCat(
            "Filtered: ", t,
            " is up (it answered ARP) but nothing came back "
            "to the connection attempt within ",
            Millis(elapsed), ": a firewall drops TCP port ", port,
            " (on that host, or in this host's outgoing rules).");
      }
      return absl::StrCat(
          "Filtered: nothing came back from ", t, " within ", Millis(elapsed),
          " (no SYN-ACK, no reset, no ICMP): a firewall DROP rule, a cloud "
          "security group, a wrong address, or a host that is down.");
    case ProbeOutcome::kRejected:
      if (icmp_type < 0) {
        return absl::StrCat("Rejected by this host before any packet left for ",
                            t, ": ", detail, ".");
      }
      return absl::StrCat(
          "Rejected by a firewall: ", IcmpName(icmp_v6, icmp_type, icmp_code),
          icmp_source.empty()
              ? ""
              : absl::StrCat(" came back from ", icmp_source,
                             icmp_from_this_host ? " (this host)" : ""),
          " for ", t,
          "; a closed port answers with a TCP reset, so this is a REJECT rule "
          "(iptables, nftables, firewalld) refusing port ",
          port, ".");
    case ProbeOutcome::kUnreachable:
      if (icmp_type >= 0) {
        return absl::StrCat(
            "Unreachable: ", IcmpName(icmp_v6, icmp_type, icmp_code),
            icmp_source.empty() ? "" : absl::StrCat(" from ", icmp_source),
            ": no route to ", t, ".");
      }
      return absl::StrCat("Unreachable: ", t, ": ", detail, ".");
    case ProbeOutcome::kDnsFailure:
      return absl::StrCat("The name '", host, "' does not resolve: ", detail,
                          ".");
    case ProbeOutcome::kError:
      return absl::StrCat("The probe of ", t, " failed: ", detail, ".");
  }
  return detail;
}

std::string ProbeResult::Fix() const {
  const std::string h = resolved_address.empty() ? host : resolved_address;
  const bool loopback =
      absl::StartsWith(h, "127.") || h == "::1" || host == "localhost";
  switch (outcome) {
    case ProbeOutcome::kOpen:
      return "Nothing to fix.";
    case ProbeOutcome::kRefused:
      if (loopback) {
        return absl::StrCat("Start the server on this host, port ", port,
                            " (check with `ss -ltnp 'sport = :", port, "'`).");
      }
      return absl::StrCat(
          "Start the server on ", host,
          " and make it listen on an address peers can reach (0.0.0.0 or ", h,
          ", not 127.0.0.1), port ", port,
          "; check with `ss -ltnp 'sport = :", port, "'` on ", host, ".");
    case ProbeOutcome::kFiltered:
      return absl::StrCat(
          "Open TCP port ", port, " inbound on ", host,
          " (iptables/nftables/ufw/firewalld on Linux, Windows Defender "
          "Firewall) and in any cloud security group or network ACL between "
          "the nodes; check that ",
          h, " is really that host's address (`ip -br addr` there).");
    case ProbeOutcome::kRejected:
      if (icmp_type < 0) {
        return absl::StrCat(
            "Check this host's routes (`ip route get ", h,
            "`; a 'prohibit' route) and its OUTPUT firewall rules and "
            "security modules.");
      }
      if (icmp_from_this_host && icmp_source != h) {
        return absl::StrCat(
            "This host's own firewall rejects outgoing TCP to port ", port,
            ": remove the REJECT rule from its OUTPUT chain, or add `iptables "
            "-I OUTPUT -p tcp --dport ",
            port, " -j ACCEPT`.");
      }
      return absl::StrCat(
          "Remove the REJECT rule for TCP port ", port, " on ",
          icmp_source.empty() ? host : icmp_source,
          ", or add an ACCEPT rule before it (e.g. `iptables -I INPUT -p tcp "
          "--dport ",
          port, " -j ACCEPT`).");
    case ProbeOutcome::kUnreachable:
      return absl::StrCat(
          "Check the address and the routes: `ip route get ", h,
          "` here, that the interface is up, and that the nodes share a "
          "network or a router between them forwards it.");
    case ProbeOutcome::kDnsFailure:
      return absl::StrCat("Use an IP address, or make '", host,
                          "' resolve on every node (DNS, or /etc/hosts); "
                          "check /etc/resolv.conf and `getent hosts ",
                          host, "`.");
    case ProbeOutcome::kError:
      return "Check the host and port given.";
  }
  return "";
}

}  // namespace muster
