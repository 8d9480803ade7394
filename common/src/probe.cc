#include "muster/common/probe.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/errqueue.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "muster/common/net.h"

namespace muster {
namespace {

constexpr int kMaxAddresses = 4;

struct Address {
  sockaddr_storage storage{};
  socklen_t len = 0;
  int family() const { return storage.ss_family; }
  const sockaddr* sa() const {
    return reinterpret_cast<const sockaddr*>(&storage);
  }
};

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
    case EHOSTDOWN:
      return "EHOSTDOWN";
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
    case ENONET:
      return "ENONET";
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
  bool local = false;  // SO_EE_ORIGIN_LOCAL: raised by this host's stack
  bool v6 = false;
  int type = -1;
  int code = -1;
  int err = 0;
  std::string source;
  bool source_is_this_host = false;
};

IcmpError ReadErrorQueue(int fd) {
  IcmpError out;
  char control[512];
  char data[64];
  iovec iov{data, sizeof(data)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  if (recvmsg(fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) return out;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr;
       c = CMSG_NXTHDR(&msg, c)) {
    const bool v4 = c->cmsg_level == SOL_IP && c->cmsg_type == IP_RECVERR;
    const bool v6 = c->cmsg_level == SOL_IPV6 && c->cmsg_type == IPV6_RECVERR;
    if (!v4 && !v6) continue;
    sock_extended_err ee;
    std::memcpy(&ee, CMSG_DATA(c), sizeof(ee));
    out.err = static_cast<int>(ee.ee_errno);
    if (ee.ee_origin == SO_EE_ORIGIN_ICMP ||
        ee.ee_origin == SO_EE_ORIGIN_ICMP6) {
      out.present = true;
      out.v6 = ee.ee_origin == SO_EE_ORIGIN_ICMP6;
      out.type = ee.ee_type;
      out.code = ee.ee_code;
      const auto* offender = reinterpret_cast<const sockaddr*>(
          CMSG_DATA(c) + sizeof(sock_extended_err));
      if (c->cmsg_len >= CMSG_LEN(sizeof(sock_extended_err) + sizeof(sockaddr)))
        out.source = SockaddrToString(offender);
    } else if (ee.ee_origin == SO_EE_ORIGIN_LOCAL) {
      out.local = true;
    }
    break;
  }
  return out;
}

// Whether `address` is one of this host's own interface addresses.
bool IsOwnAddress(const std::string& address) {
  if (address.empty()) return false;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return false;
  bool own = false;
  for (ifaddrs* i = ifs; i != nullptr && !own; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)
      continue;
    own = SockaddrToString(i->ifa_addr) == address;
  }
  freeifaddrs(ifs);
  return own;
}

// The ARP state of an IPv4 neighbour: "complete", "incomplete" (asked, never
// answered), or "" (not on the local link, or not asked).
std::string ArpState(const std::string& address) {
  // thread-self: this thread's network namespace, which setns(2) may have
  // made differ from the process's.
  std::ifstream f("/proc/thread-self/net/arp");
  if (!f) f.open("/proc/net/arp");
  std::string line;
  std::getline(f, line);  // header
  while (std::getline(f, line)) {
    std::vector<std::string> cols =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (cols.size() < 6 || cols[0] != address) continue;
    unsigned int flags = 0;
    if (!absl::SimpleHexAtoi(cols[2], &flags)) continue;
    if ((flags & 0x2) != 0) return "complete";
    return "incomplete";
  }
  return "";
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
    case EHOSTDOWN:
    case ENONET:
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

AddressResult ProbeAddress(const Address& addr, int port, absl::Time deadline) {
  AddressResult r;
  r.address = SockaddrToString(addr.sa());
  Address target = addr;
  if (target.family() == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&target.storage)->sin_port =
        htons(static_cast<uint16_t>(port));
  } else {
    reinterpret_cast<sockaddr_in6*>(&target.storage)->sin6_port =
        htons(static_cast<uint16_t>(port));
  }
  int fd =
      socket(target.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    r.error_code = errno;
    r.detail = absl::StrCat("socket(): ", ErrnoText(errno));
    return r;
  }
  int one = 1;
  if (target.family() == AF_INET) {
    setsockopt(fd, SOL_IP, IP_RECVERR, &one, sizeof(one));
  } else {
    setsockopt(fd, SOL_IPV6, IPV6_RECVERR, &one, sizeof(one));
  }
  int err = 0;
  if (connect(fd, target.sa(), target.len) != 0) err = errno;
  if (err == EINPROGRESS || err == EINTR) {
    err = 0;
    bool done = false;
    while (!done) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) break;
      pollfd p{fd, POLLOUT, 0};
      const int ms = static_cast<int>(std::max<int64_t>(
          1,
          absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)))));
      const int n = poll(&p, 1, ms);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        err = errno;
        done = true;
        break;
      }
      if (n == 0) continue;
      socklen_t len = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      done = true;
    }
    if (!done) {
      r.outcome = ProbeOutcome::kFiltered;
      r.detail = "no SYN-ACK, TCP reset or ICMP error came back";
      if (target.family() == AF_INET) {
        const std::string arp = ArpState(r.address);
        if (arp == "complete") {
          absl::StrAppend(&r.detail, "; ", r.address,
                          " is on the local link and answered ARP: the host "
                          "is up and the SYN was dropped");
        } else if (arp == "incomplete") {
          r.outcome = ProbeOutcome::kUnreachable;
          r.detail = absl::StrCat(
              "no answer to ARP for ", r.address,
              " on the local link: no host owns this address, or it is down");
        }
      }
      close(fd);
      return r;
    }
  }
  if (err == 0) {
    r.outcome = ProbeOutcome::kOpen;
    r.detail = "connected";
    close(fd);
    return r;
  }
  r.icmp = ReadErrorQueue(fd);
  close(fd);
  r.icmp.source_is_this_host = IsOwnAddress(r.icmp.source);
  Classify(err, &r);
  return r;
}

struct DnsAnswer {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  int rc ABSL_GUARDED_BY(mu) = 0;
  std::vector<Address> addresses ABSL_GUARDED_BY(mu);
};

std::string GaiText(int rc) {
  std::string name;
  switch (rc) {
    case EAI_NONAME:
      name = "EAI_NONAME: no such name";
      break;
    case EAI_AGAIN:
      name = "EAI_AGAIN: the name server did not answer (temporary failure)";
      break;
    case EAI_FAIL:
      name = "EAI_FAIL: the name server failed";
      break;
#ifdef EAI_NODATA
    case EAI_NODATA:
      name = "EAI_NODATA: the name has no address";
      break;
#endif
    case EAI_FAMILY:
      name = "EAI_FAMILY: no address of a usable family";
      break;
    default:
      name = gai_strerror(rc);
  }
  return name;
}

std::vector<Address> FromAddrinfo(const addrinfo* res) {
  std::vector<Address> out;
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
    Address addr;
    std::memcpy(&addr.storage, a->ai_addr, a->ai_addrlen);
    addr.len = a->ai_addrlen;
    bool dup = false;
    for (const Address& o : out) {
      if (SockaddrToString(o.sa()) == SockaddrToString(addr.sa())) dup = true;
    }
    if (!dup) out.push_back(addr);
  }
  return out;
}

// Resolves `host`. Numeric addresses never block; names are looked up on a
// detached thread so that a slow resolver cannot hold the caller past
// `timeout`.
int Resolve(const std::string& host, absl::Duration timeout,
            std::vector<Address>* out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) == 0) {
    *out = FromAddrinfo(res);
    freeaddrinfo(res);
    return 0;
  }
  auto answer = std::make_shared<DnsAnswer>();
  std::thread([answer, host] {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
    std::vector<Address> addresses;
    if (rc == 0) {
      addresses = FromAddrinfo(res);
      freeaddrinfo(res);
    }
    absl::MutexLock lock(&answer->mu);
    answer->rc = rc;
    answer->addresses = std::move(addresses);
    answer->done = true;
  }).detach();
  absl::MutexLock lock(&answer->mu);
  if (!answer->mu.AwaitWithTimeout(absl::Condition(&answer->done), timeout)) {
    return EAI_AGAIN;
  }
  *out = answer->addresses;
  return answer->rc;
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

int ResolveAddresses(const std::string& host, absl::Duration timeout,
                     std::vector<std::string>* out) {
  std::vector<Address> addresses;
  const int rc = Resolve(host, timeout, &addresses);
  out->clear();
  for (const Address& a : addresses) out->push_back(SockaddrToString(a.sa()));
  return rc;
}

ProbeResult ProbeTcp(const std::string& host_in, int port,
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
  std::vector<Address> addresses;
  const int rc = Resolve(host, timeout, &addresses);
  if (rc != 0 || addresses.empty()) {
    result.outcome = ProbeOutcome::kDnsFailure;
    result.detail = rc == 0 ? "the name has no IPv4 or IPv6 address"
                    : (rc == EAI_AGAIN && absl::Now() - start >= timeout)
                        ? absl::StrCat("no answer from the resolver within ",
                                       absl::FormatDuration(timeout))
                        : GaiText(rc);
    result.elapsed = absl::Now() - start;
    return result;
  }
  if (addresses.size() > kMaxAddresses) addresses.resize(kMaxAddresses);

  const absl::Time deadline = absl::Now() + timeout;
  std::vector<AddressResult> tried;
  for (const Address& addr : addresses) {
    if (!tried.empty() && absl::Now() >= deadline) break;
    tried.push_back(ProbeAddress(addr, port, deadline));
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
