#include "cli/doctor.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli/security_flags.h"
#include "cli/subcommand.h"
#include "muster/common/duration.h"
#include "muster/common/net.h"
#include "muster/common/probe.h"

extern char** environ;

namespace muster::cli {
namespace doctor {
namespace {

constexpr int kDefaultRdzvPort = 29400;
constexpr int kDefaultMasterPort = 29500;
constexpr int kMaxPortsChecked = 4096;
constexpr int kMaxTargets = 64;
const absl::Duration kToolTimeout = absl::Seconds(5);

std::string Lower(absl::string_view s) { return absl::AsciiStrToLower(s); }

const std::string* Find(const std::map<std::string, std::string>& env,
                        const std::string& key) {
  auto it = env.find(key);
  return it == env.end() ? nullptr : &it->second;
}

std::string Get(const std::map<std::string, std::string>& env,
                const std::string& key) {
  const std::string* v = Find(env, key);
  return v == nullptr ? "" : *v;
}

bool IsLoopbackText(absl::string_view address) {
  return absl::StartsWith(address, "127.") || address == "::1";
}

int PrefixLength(const sockaddr* mask) {
  if (mask == nullptr) return 0;
  const unsigned char* bytes = nullptr;
  int n = 0;
  if (mask->sa_family == AF_INET) {
    bytes = reinterpret_cast<const unsigned char*>(
        &reinterpret_cast<const sockaddr_in*>(mask)->sin_addr);
    n = 4;
  } else if (mask->sa_family == AF_INET6) {
    bytes = reinterpret_cast<const unsigned char*>(
        &reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr);
    n = 16;
  } else {
    return 0;
  }
  int bits = 0;
  for (int i = 0; i < n; ++i) bits += __builtin_popcount(bytes[i]);
  return bits;
}

// Splits on whitespace, keeping "double quoted" words (with \" inside) whole.
std::vector<std::string> Tokenize(absl::string_view line) {
  std::vector<std::string> out;
  std::string cur;
  bool in_quotes = false;
  bool have = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (in_quotes) {
      if (c == '\\' && i + 1 < line.size()) {
        cur += line[++i];
      } else if (c == '"') {
        in_quotes = false;
      } else {
        cur += c;
      }
      continue;
    }
    if (c == '"') {
      in_quotes = true;
      have = true;
      continue;
    }
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
      if (have) out.push_back(cur);
      cur.clear();
      have = false;
      continue;
    }
    cur += c;
    have = true;
  }
  if (have) out.push_back(cur);
  return out;
}

// Wraps `text` to `width` columns; the first line starts after `first`
// (already printed, `first_len` wide), the others with `indent`.
std::string Wrap(absl::string_view text, size_t first_len,
                 const std::string& indent, size_t width) {
  std::string out;
  size_t col = first_len;
  bool line_empty = true;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line_empty && col + 1 + word.size() > width) {
      absl::StrAppend(&out, "\n", indent);
      col = indent.size();
      line_empty = true;
    }
    if (!line_empty) {
      out += ' ';
      ++col;
    }
    absl::StrAppend(&out, word);
    col += word.size();
    line_empty = false;
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------
// Report formatting.

absl::string_view StatusName(Status status) {
  switch (status) {
    case Status::kPass:
      return "PASS";
    case Status::kInfo:
      return "INFO";
    case Status::kWarn:
      return "WARN";
    case Status::kFail:
      return "FAIL";
  }
  return "FAIL";
}

int Report::ExitStatus() const {
  for (const Check& c : checks) {
    if (c.status == Status::kFail) return 1;
  }
  return 0;
}

std::string FormatText(const Report& report, int width_in) {
  const size_t width = static_cast<size_t>(std::max(width_in, 60));
  size_t title_width = 5;
  for (const Check& c : report.checks) {
    title_width = std::max(title_width, c.title.size());
  }
  title_width = std::min<size_t>(title_width, 40);
  const std::string indent(8, ' ');
  std::string out = absl::StrCat("muster doctor on ", report.hostname,
                                 " (fix commands for ", report.os, ")\n\n");
  auto pad = [](const std::string& s, size_t n) {
    return s.size() >= n ? s : s + std::string(n - s.size(), ' ');
  };
  absl::StrAppend(&out, pad("STATUS", 8), pad("CHECK", title_width + 2),
                  "RESULT\n");
  int counts[4] = {0, 0, 0, 0};
  for (const Check& c : report.checks) {
    ++counts[static_cast<int>(c.status)];
    std::string head = pad(std::string(StatusName(c.status)), 8);
    std::string title = c.title;
    if (title.size() > title_width) {
      // A long title gets its own line; the result goes under it.
      absl::StrAppend(&out, head, title, "\n");
      head = std::string(8, ' ');
      title.clear();
    }
    absl::StrAppend(&head, pad(title, title_width + 2));
    const std::string result_indent(head.size(), ' ');
    absl::StrAppend(&out, head,
                    Wrap(c.summary, head.size(), result_indent, width), "\n");
    for (const std::string& e : c.evidence) {
      absl::StrAppend(&out, indent, "- ",
                      Wrap(e, indent.size() + 2, indent + "  ", width), "\n");
    }
    for (const std::string& f : c.fix) {
      absl::StrAppend(
          &out, indent,
          "fix: ", Wrap(f, indent.size() + 5, indent + "     ", width), "\n");
    }
    for (const std::string& cmd : c.commands) {
      absl::StrAppend(&out, indent, "  $ ", cmd, "\n");
    }
  }
  absl::StrAppend(&out, "\n", counts[3], " failed, ", counts[2], " warning",
                  counts[2] == 1 ? "" : "s", ", ", counts[0], " passed, ",
                  counts[1], " info\n");
  return out;
}

std::string FormatJson(const Report& report) {
  nlohmann::json j;
  j["host"] = report.hostname;
  j["os"] = report.os;
  nlohmann::json checks = nlohmann::json::array();
  nlohmann::json counts = {{"pass", 0}, {"info", 0}, {"warn", 0}, {"fail", 0}};
  for (const Check& c : report.checks) {
    nlohmann::json cj;
    cj["id"] = c.id;
    cj["title"] = c.title;
    cj["status"] = std::string(StatusName(c.status));
    cj["summary"] = c.summary;
    cj["evidence"] = c.evidence;
    cj["fix"] = c.fix;
    cj["commands"] = c.commands;
    cj["data"] = c.data;
    checks.push_back(std::move(cj));
    const std::string key = Lower(StatusName(c.status));
    counts[key] = counts[key].get<int>() + 1;
  }
  j["checks"] = std::move(checks);
  j["counts"] = std::move(counts);
  j["exit_status"] = report.ExitStatus();
  return j.dump(2) + "\n";
}

// ---------------------------------------------------------------------------
// Interfaces.

std::vector<InterfaceAddress> ListInterfaceAddresses() {
  std::vector<InterfaceAddress> out;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return out;
  for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    InterfaceAddress a;
    a.name = i->ifa_name;
    a.family = family;
    a.address = SockaddrToString(i->ifa_addr);
    a.prefix_len = PrefixLength(i->ifa_netmask);
    a.up = (i->ifa_flags & IFF_UP) != 0;
    a.running = (i->ifa_flags & IFF_RUNNING) != 0;
    a.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(std::move(a));
  }
  freeifaddrs(ifs);
  return out;
}

namespace {

std::string Describe(const InterfaceAddress& a) {
  return absl::StrCat(a.name, " ", a.address);
}

std::string DescribeAll(const std::vector<InterfaceAddress>& v) {
  std::vector<std::string> parts;
  for (const auto& a : v) parts.push_back(Describe(a));
  return absl::StrJoin(parts, ", ");
}

// NCCL's findInterfaces(prefixList, ...).
std::vector<InterfaceAddress> NcclFind(
    const std::vector<InterfaceAddress>& addresses, absl::string_view list,
    int family, int max) {
  bool search_not = absl::ConsumePrefix(&list, "^");
  bool search_exact = absl::ConsumePrefix(&list, "=");
  std::vector<std::string> prefixes;
  for (absl::string_view item : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    // "eth0:1234": NCCL parses a port and ignores it for interface names.
    size_t colon = item.find(':');
    prefixes.emplace_back(item.substr(0, colon));
  }
  std::vector<InterfaceAddress> found;
  for (const InterfaceAddress& a : addresses) {
    if (static_cast<int>(found.size()) >= max) break;
    if (!a.running) continue;
    if (family != -1 && a.family != family) continue;
    if (a.family == AF_INET6 && a.address == "::1") continue;
    bool match = prefixes.empty();
    for (const std::string& p : prefixes) {
      if (search_exact ? a.name == p : absl::StartsWith(a.name, p)) {
        match = true;
      }
    }
    if (match == search_not) continue;
    bool dup = false;
    for (const auto& f : found) dup = dup || f.name == a.name;
    if (!dup) found.push_back(a);
  }
  return found;
}

bool SameSubnet(const InterfaceAddress& a, const std::string& remote) {
  unsigned char la[16], ra[16];
  int n = a.family == AF_INET ? 4 : 16;
  if (inet_pton(a.family, a.address.c_str(), la) != 1) return false;
  if (inet_pton(a.family, remote.c_str(), ra) != 1) return false;
  int bits = a.prefix_len;
  for (int i = 0; i < n && bits > 0; ++i, bits -= 8) {
    unsigned char mask =
        bits >= 8 ? 0xff : static_cast<unsigned char>(0xff << (8 - bits));
    if ((la[i] & mask) != (ra[i] & mask)) return false;
  }
  return true;
}

}  // namespace

InterfaceChoice NcclSocketInterfaces(
    const std::vector<InterfaceAddress>& addresses,
    const std::map<std::string, std::string>& env, int max_interfaces) {
  InterfaceChoice choice;
  int family = -1;
  const std::string fam = Get(env, "NCCL_SOCKET_FAMILY");
  std::string fam_note;
  if (fam == "AF_INET") {
    family = AF_INET;
    fam_note = ", IPv4 only (NCCL_SOCKET_FAMILY=AF_INET)";
  } else if (fam == "AF_INET6") {
    family = AF_INET6;
    fam_note = ", IPv6 only (NCCL_SOCKET_FAMILY=AF_INET6)";
  }
  const std::string ifname = Get(env, "NCCL_SOCKET_IFNAME");
  if (ifname.size() > 1) {
    choice.chosen = NcclFind(addresses, ifname, family, max_interfaces);
    absl::string_view l = ifname;
    const bool exclude = absl::ConsumePrefix(&l, "^");
    const bool exact = absl::ConsumePrefix(&l, "=");
    choice.rule = absl::StrCat(
        "NCCL_SOCKET_IFNAME=", ifname, ": ",
        exclude ? "running interfaces whose names do not "
                : "running "
                  "interfaces "
                  "whose names ",
        exact ? "equal " : "start with ", "one of '", l, "'", fam_note);
    if (choice.chosen.empty()) {
      choice.error = absl::StrCat(
          "NCCL fails at init: 'Bootstrap : no socket interface found' "
          "(NCCL_SOCKET_IFNAME=",
          ifname, " matches no running interface with an address)");
    }
    return choice;
  }
  std::string ignored;
  if (!ifname.empty()) {
    ignored = absl::StrCat(" (NCCL_SOCKET_IFNAME='", ifname,
                           "' is ignored: NCCL needs more than one character)");
  }
  choice.chosen = NcclFind(addresses, "ib", family, max_interfaces);
  if (!choice.chosen.empty()) {
    choice.rule = absl::StrCat("NCCL_SOCKET_IFNAME unset", ignored,
                               ": InfiniBand (ib*) interfaces first", fam_note);
    return choice;
  }
  const std::string comm_id = Get(env, "NCCL_COMM_ID");
  if (comm_id.size() > 1) {
    auto hp = ParseHostPort(comm_id, 0);
    if (hp.ok()) {
      for (const InterfaceAddress& a : addresses) {
        if (SameSubnet(a, hp->host)) {
          choice.chosen = {a};
          choice.rule = absl::StrCat("NCCL_SOCKET_IFNAME unset", ignored,
                                     ", no ib*: the interface in the subnet of "
                                     "NCCL_COMM_ID=",
                                     comm_id);
          return choice;
        }
      }
    }
  }
  struct Step {
    const char* list;
    const char* words;
  };
  const Step steps[] = {
      {"^docker,lo,virbr",
       "no ib*: interfaces other than docker*, lo*, virbr*"},
      {"docker", "only docker* interfaces left"},
      {"lo", "only loopback left"},
      {"virbr", "only virbr* interfaces left"},
  };
  for (const Step& s : steps) {
    choice.chosen = NcclFind(addresses, s.list, family, max_interfaces);
    if (!choice.chosen.empty()) {
      choice.rule =
          absl::StrCat("NCCL_SOCKET_IFNAME unset", ignored, ", ", s.words,
                       ", in the order the system lists them", fam_note);
      return choice;
    }
  }
  choice.rule = absl::StrCat("NCCL_SOCKET_IFNAME unset", ignored, fam_note);
  choice.error = "NCCL fails at init: no running interface with an address";
  return choice;
}

namespace {

InterfaceChoice ByInterfaceNames(const std::vector<InterfaceAddress>& addresses,
                                 const std::string& variable,
                                 const std::string& value,
                                 const std::string& library) {
  InterfaceChoice choice;
  choice.rule = absl::StrCat(variable, "=", value,
                             ": the first address of the interface of exactly "
                             "that name");
  std::vector<std::string> missing;
  for (absl::string_view name : absl::StrSplit(value, ',', absl::SkipEmpty())) {
    bool found = false;
    for (const InterfaceAddress& a : addresses) {
      if (a.name == name) {
        choice.chosen.push_back(a);
        found = true;
        break;
      }
    }
    if (!found) missing.emplace_back(name);
  }
  if (!missing.empty()) {
    choice.error = absl::StrCat(
        library,
        " fails: 'Unable to find address for: ", absl::StrJoin(missing, ","),
        "' (", variable, " names no interface with an address here)");
  }
  return choice;
}

InterfaceAddress AddressOnly(const std::vector<InterfaceAddress>& addresses,
                             const std::string& address) {
  for (const InterfaceAddress& a : addresses) {
    if (a.address == address) return a;
  }
  InterfaceAddress a;
  a.address = address;
  a.family = address.find(':') != std::string::npos ? AF_INET6 : AF_INET;
  a.loopback = IsLoopbackText(address);
  a.name = a.loopback ? "lo" : "?";
  a.up = a.running = a.loopback;
  return a;
}

}  // namespace

InterfaceChoice PytorchGlooDevice(
    const std::vector<InterfaceAddress>& addresses,
    const std::map<std::string, std::string>& env, const std::string& hostname,
    const std::vector<ResolvedAddress>& hostname_addresses) {
  const std::string ifname = Get(env, "GLOO_SOCKET_IFNAME");
  if (!ifname.empty()) {
    return ByInterfaceNames(addresses, "GLOO_SOCKET_IFNAME", ifname, "Gloo");
  }
  InterfaceChoice choice;
  for (const ResolvedAddress& r : hostname_addresses) {
    if (!r.bindable) continue;
    choice.chosen = {AddressOnly(addresses, r.address)};
    choice.rule = absl::StrCat(
        "GLOO_SOCKET_IFNAME unset: the first address the host name '", hostname,
        "' resolves to that this host can bind");
    return choice;
  }
  choice.chosen = {AddressOnly(addresses, "127.0.0.1")};
  choice.rule = absl::StrCat(
      "GLOO_SOCKET_IFNAME unset and the host name '", hostname,
      "' resolves to no address of this host: PyTorch falls back to loopback "
      "(it warns 'Unable to resolve hostname to a (local) address')");
  return choice;
}

InterfaceChoice MusterCommDevice(const std::vector<InterfaceAddress>& addresses,
                                 const std::map<std::string, std::string>& env,
                                 const std::string& advertised_address) {
  for (const char* var : {"MUSTER_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}) {
    const std::string v = Get(env, var);
    if (!v.empty()) {
      return ByInterfaceNames(addresses, var, v, "libmuster_comm");
    }
  }
  InterfaceChoice choice;
  choice.chosen = {AddressOnly(addresses, advertised_address)};
  choice.rule =
      "MUSTER_SOCKET_IFNAME and GLOO_SOCKET_IFNAME unset: this node's "
      "advertised address (the first non-loopback IPv4 address of an "
      "interface that is up; loopback when every rank is on this node)";
  return choice;
}

// ---------------------------------------------------------------------------
// Ports.

absl::StatusOr<std::vector<PortRange>> ParsePortRanges(absl::string_view text) {
  std::vector<PortRange> out;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("ports '", text, "': ", why,
                     "; write PORT, FIRST-LAST or a comma list of those"));
  };
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    item = absl::StripAsciiWhitespace(item);
    size_t sep = item.find_first_of("-:");
    PortRange r;
    absl::string_view a = item.substr(0, sep);
    absl::string_view b =
        sep == absl::string_view::npos ? a : item.substr(sep + 1);
    if (!absl::SimpleAtoi(a, &r.first) || !absl::SimpleAtoi(b, &r.last)) {
      return bad(absl::StrCat("'", item, "' is not a port or a range"));
    }
    if (r.first < 1 || r.last > 65535 || r.first > 65535 || r.last < 1) {
      return bad(absl::StrCat("'", item, "' is outside 1..65535"));
    }
    if (r.first > r.last) {
      return bad(absl::StrCat("'", item, "' goes backwards"));
    }
    out.push_back(r);
  }
  if (out.empty()) return bad("no port given");
  return out;
}

std::string PortRangesText(const std::vector<PortRange>& ranges,
                           absl::string_view range_sep) {
  std::vector<std::string> parts;
  for (const PortRange& r : ranges) {
    parts.push_back(r.first == r.last
                        ? absl::StrCat(r.first)
                        : absl::StrCat(r.first, range_sep, r.last));
  }
  return absl::StrJoin(parts, ",");
}

namespace {

// Merges and sorts ranges.
std::vector<PortRange> Normalize(std::vector<PortRange> v) {
  std::sort(v.begin(), v.end(), [](const PortRange& a, const PortRange& b) {
    return a.first < b.first;
  });
  std::vector<PortRange> out;
  for (const PortRange& r : v) {
    if (!out.empty() && r.first <= out.back().last + 1) {
      out.back().last = std::max(out.back().last, r.last);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

// "5000", "5000:5010" (iptables) or "5000-5010" (nft).
bool ParseOnePortRange(absl::string_view s, PortRange* r) {
  size_t sep = s.find_first_of(":-");
  absl::string_view a = s.substr(0, sep);
  absl::string_view b = sep == absl::string_view::npos ? a : s.substr(sep + 1);
  if (!absl::SimpleAtoi(a, &r->first) || !absl::SimpleAtoi(b, &r->last)) {
    // A service name ("ssh") as iptables -S never prints but nft may.
    servent* se = getservbyname(std::string(a).c_str(), "tcp");
    if (se == nullptr || sep != absl::string_view::npos) return false;
    r->first = r->last = ntohs(static_cast<uint16_t>(se->s_port));
  }
  return r->first <= r->last;
}

}  // namespace

// ---------------------------------------------------------------------------
// Firewall rules.

namespace {

bool NeutralIptablesModule(absl::string_view m) {
  return m == "tcp" || m == "udp" || m == "multiport" || m == "comment" ||
         m == "conntrack" || m == "state" || m == "addrtype" || m == "icmp" ||
         m == "icmp6";
}

bool NonTerminatingTarget(absl::string_view t) {
  static const char* const kTargets[] = {
      "LOG",         "NFLOG",     "ULOG",     "MARK",    "CONNMARK", "CT",
      "TRACE",       "AUDIT",     "TCPMSS",   "DSCP",    "TOS",      "SET",
      "NOTRACK",     "CLASSIFY",  "CHECKSUM", "NFQUEUE", "TEE",      "SECMARK",
      "CONNSECMARK", "IDLETIMER", "LED",      "RATEEST", "HMARK"};
  for (const char* k : kTargets) {
    if (t == k) return true;
  }
  return false;
}

bool IsLoopbackNet(absl::string_view v) {
  return absl::StartsWith(v, "127.") || v == "::1" || v == "::1/128";
}

void ParseIptablesRule(const std::vector<std::string>& tok, size_t start,
                       FirewallRule* r) {
  bool negate = false;
  for (size_t i = start; i < tok.size(); ++i) {
    const std::string& t = tok[i];
    const bool has_val = i + 1 < tok.size();
    const std::string val = has_val ? tok[i + 1] : "";
    if (t == "!") {
      negate = true;
      continue;
    }
    if (t == "-p" || t == "--protocol") {
      const std::string p = Lower(val);
      const bool tcp = p == "tcp" || p == "6" || p == "all" || p == "0";
      if (negate ? (p == "tcp" || p == "6") : !tcp) r->applies_to_tcp = false;
      if (negate && !(p == "tcp" || p == "6")) r->conditional = true;
      ++i;
    } else if (t == "-s" || t == "--source" || t == "-d" ||
               t == "--destination") {
      if (val != "0.0.0.0/0" && val != "::/0") {
        if (!negate && (t == "-s" || t == "--source") && IsLoopbackNet(val)) {
          r->not_for_peers = true;  // loopback only: never a peer
        } else {
          r->conditional = true;
        }
      }
      ++i;
    } else if (t == "-i" || t == "--in-interface") {
      if (!negate && val == "lo") {
        r->not_for_peers = true;  // loopback only: never a peer
      } else {
        r->conditional = true;
      }
      ++i;
    } else if (t == "-o" || t == "--out-interface") {
      r->conditional = true;
      ++i;
    } else if (t == "--dport" || t == "--destination-port" || t == "--dports" ||
               t == "--destination-ports") {
      for (absl::string_view item :
           absl::StrSplit(val, ',', absl::SkipEmpty())) {
        PortRange pr;
        if (ParseOnePortRange(item, &pr)) {
          r->dports.push_back(pr);
        } else {
          r->dports_unknown = true;
        }
      }
      r->dports_negated = negate;
      ++i;
    } else if (t == "--sport" || t == "--source-port" || t == "--sports" ||
               t == "--source-ports") {
      r->conditional = true;
      ++i;
    } else if (t == "-m" || t == "--match") {
      if (!NeutralIptablesModule(val)) r->conditional = true;
      ++i;
    } else if (t == "--state" || t == "--ctstate") {
      bool new_conn = false;
      for (absl::string_view s : absl::StrSplit(val, ',')) {
        if (s == "NEW" || s == "UNTRACKED") new_conn = true;
      }
      if (negate) new_conn = !new_conn;
      if (!new_conn) r->not_for_peers = true;
      ++i;
    } else if (t == "-j" || t == "--jump" || t == "-g" || t == "--goto") {
      if (val == "ACCEPT") {
        r->verdict = RuleVerdict::kAccept;
      } else if (val == "DROP") {
        r->verdict = RuleVerdict::kDrop;
      } else if (val == "REJECT") {
        r->verdict = RuleVerdict::kReject;
      } else if (val == "RETURN") {
        r->verdict = RuleVerdict::kReturn;
      } else if (NonTerminatingTarget(val)) {
        r->verdict = RuleVerdict::kNone;
      } else {
        r->verdict = (t == "-g" || t == "--goto") ? RuleVerdict::kGoto
                                                  : RuleVerdict::kJump;
        r->target_chain = val;
      }
      ++i;
    } else if (absl::StartsWith(t, "-")) {
      // Options we do not interpret (--comment, --reject-with, --dst-type,
      // --tcp-flags, --syn: a new connection's SYN matches them): skip their
      // values.
      while (i + 1 < tok.size() && !absl::StartsWith(tok[i + 1], "-") &&
             tok[i + 1] != "!") {
        ++i;
      }
    }
    negate = false;
  }
}

}  // namespace

FirewallRuleset ParseIptablesRules(absl::string_view text,
                                   absl::string_view source) {
  FirewallRuleset rs;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    std::vector<std::string> tok = Tokenize(line);
    if (tok.size() < 2) continue;
    if (tok[0] == "-P" && tok.size() >= 3) {
      FirewallChain c;
      c.source = std::string(source);
      c.table = "filter";
      c.name = tok[1];
      c.input_hook = tok[1] == "INPUT";
      c.policy = tok[2];
      rs.chains.push_back(c);
    } else if (tok[0] == "-N") {
      FirewallChain c;
      c.source = std::string(source);
      c.table = "filter";
      c.name = tok[1];
      rs.chains.push_back(c);
    } else if (tok[0] == "-A") {
      FirewallRule r;
      r.source = std::string(source);
      r.table = "filter";
      r.chain = tok[1];
      r.text = std::string(line);
      ParseIptablesRule(tok, 2, &r);
      rs.rules.push_back(std::move(r));
    }
  }
  return rs;
}

namespace {

// Reads an nft value at tok[*i]: a word, or "{ a , b-c }". Advances *i to its
// last token.
std::vector<std::string> NftValue(const std::vector<std::string>& tok,
                                  size_t* i) {
  std::vector<std::string> out;
  if (*i >= tok.size()) return out;
  if (tok[*i] != "{") {
    out.push_back(tok[*i]);
    return out;
  }
  while (++*i < tok.size() && tok[*i] != "}") {
    if (tok[*i] != ",") out.push_back(tok[*i]);
  }
  return out;
}

void ParseNftRule(const std::vector<std::string>& tok, FirewallRule* r) {
  static const std::set<std::string> kNeutral = {"counter",
                                                 "packets",
                                                 "bytes",
                                                 "meta",
                                                 "nfproto",
                                                 "ipv4",
                                                 "ipv6",
                                                 "inet",
                                                 "ip",
                                                 "ip6",
                                                 "log",
                                                 "prefix",
                                                 "level",
                                                 "flags",
                                                 "comment",
                                                 "l4proto",
                                                 "protocol",
                                                 "nexthdr",
                                                 "ct",
                                                 "tcp",
                                                 "th",
                                                 "notrack",
                                                 "continue",
                                                 "queue",
                                                 "with",
                                                 "icmp",
                                                 "icmpx",
                                                 "icmpv6",
                                                 "type",
                                                 "admin-prohibited",
                                                 "port-unreachable",
                                                 "host-unreachable",
                                                 "net-unreachable",
                                                 "host-prohibited",
                                                 "net-prohibited",
                                                 "reset",
                                                 "prot-unreachable",
                                                 "no-route",
                                                 "addr-unreachable"};
  for (size_t i = 0; i < tok.size(); ++i) {
    const std::string& t = tok[i];
    auto next = [&](size_t k) -> std::string {
      return i + k < tok.size() ? tok[i + k] : "";
    };
    if ((t == "tcp" || t == "th") && next(1) == "dport") {
      i += 2;
      bool negated = false;
      if (i < tok.size() && tok[i] == "!=") {
        negated = true;
        ++i;
      }
      for (const std::string& v : NftValue(tok, &i)) {
        PortRange pr;
        if (absl::StartsWith(v, "@")) {
          r->dports_unknown = true;  // until the set is looked up
          r->dports_set = v;
        } else if (!ParseOnePortRange(v, &pr)) {
          r->dports_unknown = true;
        } else {
          r->dports.push_back(pr);
        }
      }
      r->dports_negated = negated;
    } else if ((t == "tcp" || t == "th") && next(1) == "sport") {
      r->conditional = true;
      i += 2;
      if (i < tok.size() && tok[i] == "!=") ++i;
      NftValue(tok, &i);
    } else if (t == "tcp" && next(1) == "flags") {
      r->conditional = true;
      ++i;
    } else if (t == "udp" || t == "sctp" || t == "dccp" || t == "udplite" ||
               ((t == "icmp" || t == "icmpv6") && next(1) == "type")) {
      if (next(1) == "dport" || next(1) == "sport" || next(1) == "type") {
        r->applies_to_tcp = false;
      }
    } else if (t == "l4proto" ||
               (t == "protocol" && i > 0 && tok[i - 1] == "ip") ||
               t == "nexthdr") {
      ++i;
      bool negated = false;
      if (i < tok.size() && tok[i] == "!=") {
        negated = true;
        ++i;
      }
      bool tcp = false;
      for (const std::string& v : NftValue(tok, &i)) {
        if (v == "tcp" || v == "6") tcp = true;
      }
      if (negated) tcp = !tcp;
      if (!tcp) r->applies_to_tcp = false;
    } else if (t == "ct" && (next(1) == "state" || next(1) == "status")) {
      const bool is_state = next(1) == "state";
      i += 2;
      bool negated = false;
      if (i < tok.size() && tok[i] == "!=") {
        negated = true;
        ++i;
      }
      std::vector<std::string> states;
      for (const std::string& v : NftValue(tok, &i)) {
        for (absl::string_view s : absl::StrSplit(v, ',', absl::SkipEmpty())) {
          states.emplace_back(s);
        }
      }
      if (is_state) {
        bool new_conn = false;
        for (const auto& s : states) new_conn = new_conn || s == "new";
        if (negated) new_conn = !new_conn;
        if (!new_conn) r->not_for_peers = true;
      } else {
        r->conditional = true;
      }
    } else if (t == "iif" || t == "iifname") {
      ++i;
      bool negated = false;
      if (i < tok.size() && tok[i] == "!=") {
        negated = true;
        ++i;
      }
      std::vector<std::string> v = NftValue(tok, &i);
      if (!negated && v.size() == 1 && v[0] == "lo") {
        r->not_for_peers = true;  // loopback only: never a peer
      } else {
        r->conditional = true;
      }
    } else if ((t == "ip" || t == "ip6") &&
               (next(1) == "saddr" || next(1) == "daddr")) {
      const bool saddr = next(1) == "saddr";
      i += 2;
      bool negated = false;
      if (i < tok.size() && tok[i] == "!=") {
        negated = true;
        ++i;
      }
      std::vector<std::string> v = NftValue(tok, &i);
      if (saddr && !negated && v.size() == 1 && IsLoopbackNet(v[0])) {
        r->not_for_peers = true;
      } else {
        r->conditional = true;
      }
    } else if (t == "accept" || t == "drop" || t == "reject" || t == "return") {
      r->verdict = t == "accept"   ? RuleVerdict::kAccept
                   : t == "drop"   ? RuleVerdict::kDrop
                   : t == "reject" ? RuleVerdict::kReject
                                   : RuleVerdict::kReturn;
      return;  // the verdict ends the rule ("reject with icmp type ...")
    } else if (t == "jump" || t == "goto") {
      r->verdict = t == "jump" ? RuleVerdict::kJump : RuleVerdict::kGoto;
      r->target_chain = next(1);
      return;
    } else if (t == "comment" || t == "prefix") {
      ++i;  // its quoted value
    } else if (absl::ascii_isdigit(static_cast<unsigned char>(t[0])) ||
               kNeutral.count(t) > 0) {
      // Values (counter numbers) and words that do not limit the match.
    } else {
      // Anything else (oif, meta mark, limit, fib, sets, vmaps ...) may limit
      // which packets the rule matches.
      r->conditional = true;
    }
  }
}

}  // namespace

namespace {

// The ports of an nft set of services ("type inet_service; elements = { 22,
// 6000-6010 }"), or nullopt when it is some other kind of set.
std::optional<std::vector<PortRange>> NftSetPorts(const std::string& text) {
  std::vector<std::string> tok = Tokenize(text);
  bool services = false;
  std::vector<PortRange> out;
  for (size_t i = 0; i < tok.size(); ++i) {
    if ((tok[i] == "type" && i + 1 < tok.size() &&
         tok[i + 1] == "inet_service") ||
        (tok[i] == "dport" && i > 0 && tok[i - 1] != "@")) {
      services = true;
    }
    if (tok[i] == "elements") {
      for (i += 2; i < tok.size() && tok[i] != "{"; ++i) {
      }
      std::vector<std::string> values = NftValue(tok, &i);
      for (const std::string& v : values) {
        PortRange pr;
        if (!ParseOnePortRange(v, &pr)) return std::nullopt;
        out.push_back(pr);
      }
    }
  }
  if (!services) return std::nullopt;
  return out;
}

}  // namespace

FirewallRuleset ParseNftRuleset(absl::string_view text) {
  FirewallRuleset rs;
  std::set<std::string> iptables_tables;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    // "# Warning: table ip filter is managed by iptables-nft, do not touch!"
    line = absl::StripAsciiWhitespace(line);
    if (absl::StartsWith(line, "# Warning: table ") &&
        absl::StrContains(line, "iptables-nft")) {
      std::vector<std::string> tok = Tokenize(line);
      if (tok.size() >= 5) iptables_tables.insert(tok[3] + " " + tok[4]);
    }
  }
  std::string table;
  bool skip_table = false;
  FirewallChain* chain = nullptr;
  int depth = 0;
  int skip_depth = -1;  // inside a set/map/... block deeper than this
  std::string set_key;  // "inet filter @name" while reading a set
  std::string set_text;
  std::map<std::string, std::optional<std::vector<PortRange>>> sets;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || absl::StartsWith(line, "#")) continue;
    std::string spaced = absl::StrReplaceAll(
        line, {{"{", " { "}, {"}", " } "}, {",", " , "}, {";", " ; "}});
    std::vector<std::string> tok = Tokenize(spaced);
    if (tok.empty()) continue;
    const int opens =
        static_cast<int>(std::count(line.begin(), line.end(), '{'));
    const int closes =
        static_cast<int>(std::count(line.begin(), line.end(), '}'));
    if (skip_depth >= 0) {
      depth += opens - closes;
      if (!set_key.empty()) absl::StrAppend(&set_text, " ", spaced);
      if (depth <= skip_depth) {
        skip_depth = -1;
        if (!set_key.empty()) sets[set_key] = NftSetPorts(set_text);
        set_key.clear();
      }
      continue;
    }
    if (depth == 0 && tok[0] == "table" && tok.size() >= 3) {
      table = tok[1] + " " + tok[2];
      if (tok[2] == "{") table = "ip " + tok[1];  // "table NAME {" (family ip)
      skip_table =
          iptables_tables.count(table) > 0 || table == "inet firewalld";
      depth += opens - closes;
      chain = nullptr;
      continue;
    }
    if (depth == 1 && tok[0] == "chain" && tok.size() >= 2) {
      FirewallChain c;
      c.source = "nft";
      c.table = table;
      c.name = tok[1];
      rs.chains.push_back(c);
      chain = skip_table ? nullptr : &rs.chains.back();
      if (skip_table) rs.chains.pop_back();
      depth += opens - closes;
      if (depth <= 1) chain = nullptr;
      continue;
    }
    if (depth == 1 && opens > closes) {
      // set, map, flowtable, counter, quota, ct helper ... blocks; the
      // elements of a set of ports are kept for rules that name it.
      skip_depth = depth;
      if (tok[0] == "set" && tok.size() >= 2) {
        set_key = absl::StrCat(table, " @", tok[1]);
        set_text.clear();
      }
      depth += opens - closes;
      continue;
    }
    if (depth == 2 && chain != nullptr) {
      if (tok[0] == "type") {
        chain->input_hook = false;
        for (size_t i = 0; i + 1 < tok.size(); ++i) {
          if (tok[i] == "hook" && tok[i + 1] == "input" && tok[1] == "filter")
            chain->input_hook = true;
          if (tok[i] == "policy") {
            chain->policy = absl::AsciiStrToUpper(tok[i + 1]);
          }
        }
        if (chain->policy.empty()) chain->policy = "ACCEPT";
        if (chain->input_hook && rs.nft_input_chain.empty()) {
          rs.nft_input_chain = absl::StrCat(table, " ", chain->name);
        }
      } else if (tok[0] != "}" && tok[0] != "policy") {
        FirewallRule r;
        r.source = "nft";
        r.table = table;
        r.chain = chain->name;
        r.text = std::string(line);
        ParseNftRule(tok, &r);
        rs.rules.push_back(std::move(r));
      }
    }
    depth += opens - closes;
    if (depth < 2) chain = nullptr;
    if (depth <= 0) {
      depth = 0;
      table.clear();
      skip_table = false;
    }
  }
  for (FirewallRule& r : rs.rules) {
    if (r.dports_set.empty()) continue;
    auto it = sets.find(absl::StrCat(r.table, " ", r.dports_set));
    if (it == sets.end() || !it->second.has_value()) continue;
    r.dports.insert(r.dports.end(), it->second->begin(), it->second->end());
    r.dports_unknown = false;
  }
  return rs;
}

namespace {

struct Eval {
  enum Kind { kNone, kAccepted, kBlocked, kReturned } kind = kNone;
  std::string by;
  std::vector<std::string> maybe_blocked_by;
  std::vector<std::string> maybe_accepted_by;
};

std::string RuleLabel(const FirewallRule& r) {
  if (r.source == "nft") {
    return absl::StrCat("nft ", r.table, " chain ", r.chain, ": ", r.text);
  }
  return absl::StrCat(r.source, ": ", r.text);
}

bool PortMatches(const FirewallRule& r, int port) {
  if (r.dports.empty()) return true;
  bool in = false;
  for (const PortRange& p : r.dports) in = in || p.Contains(port);
  return in != r.dports_negated;
}

Eval EvalChain(const FirewallRuleset& rs, const std::string& source,
               const std::string& table, const std::string& chain, int port,
               int depth) {
  Eval out;
  if (depth > 16) return out;
  for (const FirewallRule& r : rs.rules) {
    if (r.source != source || r.table != table || r.chain != chain) continue;
    if (!r.applies_to_tcp || r.not_for_peers) continue;
    if (!r.dports_unknown && !PortMatches(r, port)) continue;
    const bool conditional = r.conditional || r.dports_unknown;
    switch (r.verdict) {
      case RuleVerdict::kNone:
        break;
      case RuleVerdict::kAccept:
        if (conditional) {
          out.maybe_accepted_by.push_back(RuleLabel(r));
          break;
        }
        out.kind = Eval::kAccepted;
        out.by = RuleLabel(r);
        return out;
      case RuleVerdict::kDrop:
      case RuleVerdict::kReject:
        if (conditional) {
          out.maybe_blocked_by.push_back(RuleLabel(r));
          break;
        }
        out.kind = Eval::kBlocked;
        out.by = RuleLabel(r);
        return out;
      case RuleVerdict::kReturn:
        if (!conditional) {
          out.kind = Eval::kReturned;
          return out;
        }
        break;
      case RuleVerdict::kJump:
      case RuleVerdict::kGoto: {
        Eval sub =
            EvalChain(rs, source, table, r.target_chain, port, depth + 1);
        for (auto& m : sub.maybe_blocked_by) out.maybe_blocked_by.push_back(m);
        for (auto& m : sub.maybe_accepted_by)
          out.maybe_accepted_by.push_back(m);
        if (sub.kind == Eval::kAccepted || sub.kind == Eval::kBlocked) {
          if (conditional) {
            (sub.kind == Eval::kAccepted ? out.maybe_accepted_by
                                         : out.maybe_blocked_by)
                .push_back(sub.by);
            break;
          }
          out.kind = sub.kind;
          out.by = sub.by;
          return out;
        }
        if (r.verdict == RuleVerdict::kGoto && !conditional) {
          out.kind = Eval::kReturned;
          return out;
        }
        break;
      }
    }
  }
  return out;
}

}  // namespace

PortDecision DecidePort(const FirewallRuleset& rs, int port) {
  PortDecision d;
  std::vector<std::string> maybe;
  bool blocked = false;
  for (const FirewallChain& c : rs.chains) {
    if (!c.input_hook) continue;
    Eval e = EvalChain(rs, c.source, c.table, c.name, port, 0);
    std::string base = c.source == "nft"
                           ? absl::StrCat("nft ", c.table, " chain ", c.name)
                           : absl::StrCat(c.source, " chain ", c.name);
    bool accepted = false;
    std::string by;
    if (e.kind == Eval::kAccepted) {
      accepted = true;
      by = e.by;
    } else if (e.kind == Eval::kBlocked) {
      by = e.by;
    } else if (c.policy == "DROP" || c.policy == "REJECT") {
      by = absl::StrCat(base, ": policy ", c.policy);
    } else {
      accepted = true;
      by = absl::StrCat(base, ": policy ",
                        c.policy.empty() ? "ACCEPT" : c.policy);
    }
    if (!accepted) {
      if (!e.maybe_accepted_by.empty()) {
        maybe.push_back(absl::StrCat(by, " (unless accepted by ",
                                     e.maybe_accepted_by.front(), ")"));
      } else if (!blocked) {
        blocked = true;
        d.by = by;
      }
    } else if (!e.maybe_blocked_by.empty()) {
      maybe.push_back(
          absl::StrCat(e.maybe_blocked_by.front(), " (for some sources)"));
    } else if (d.by.empty()) {
      d.by = by;
    }
  }
  if (blocked) {
    d.kind = PortDecision::kBlocked;
  } else if (!maybe.empty()) {
    d.kind = PortDecision::kMaybe;
    d.by = maybe.front();
  } else {
    d.kind = PortDecision::kAllowed;
  }
  return d;
}

std::vector<std::string> OpenPortCommands(
    absl::string_view os, absl::string_view tool,
    const std::vector<PortRange>& ports_in, absl::string_view nft_chain) {
  std::vector<PortRange> ports = Normalize(ports_in);
  std::vector<std::string> out;
  if (ports.empty()) return out;
  const std::string dash = PortRangesText(ports, "-");
  if (os == "windows") {
    std::vector<std::string> ps;
    for (const PortRange& r : ports) {
      ps.push_back(r.first == r.last
                       ? absl::StrCat(r.first)
                       : absl::StrCat("\"", r.first, "-", r.last, "\""));
    }
    out.push_back(absl::StrCat(
        "netsh advfirewall firewall add rule name=\"muster TCP ", dash,
        "\" dir=in action=allow protocol=TCP localport=", dash));
    out.push_back(
        absl::StrCat("New-NetFirewallRule -DisplayName \"muster TCP ", dash,
                     "\" -Direction Inbound -Protocol TCP -LocalPort ",
                     absl::StrJoin(ps, ","), " -Action Allow"));
    return out;
  }
  const bool all = tool.empty();
  auto tag = [&](const char* what) {
    return all ? absl::StrCat("   # ", what) : std::string();
  };
  if (all || tool == "iptables") {
    if (ports.size() == 1) {
      out.push_back(absl::StrCat("iptables -I INPUT -p tcp --dport ",
                                 PortRangesText(ports, ":"), " -j ACCEPT",
                                 tag("iptables")));
    } else {
      out.push_back(absl::StrCat(
          "iptables -I INPUT -p tcp -m multiport --dports ",
          PortRangesText(ports, ":"), " -j ACCEPT", tag("iptables")));
    }
  }
  if (all || tool == "nft") {
    std::string chain =
        nft_chain.empty() ? "inet filter input" : std::string(nft_chain);
    std::string set =
        ports.size() == 1
            ? dash
            : absl::StrCat("{ ", absl::StrReplaceAll(dash, {{",", ", "}}),
                           " }");
    out.push_back(absl::StrCat("nft insert rule ", chain, " tcp dport ", set,
                               " accept", tag("nftables")));
  }
  if (all || tool == "ufw") {
    for (const PortRange& r : ports) {
      out.push_back(absl::StrCat("ufw allow ",
                                 r.first == r.last
                                     ? absl::StrCat(r.first)
                                     : absl::StrCat(r.first, ":", r.last),
                                 "/tcp", tag("ufw")));
    }
  }
  if (all || tool == "firewalld") {
    std::string cmd = "firewall-cmd --permanent";
    for (const PortRange& r : ports) {
      absl::StrAppend(&cmd, " --add-port=",
                      r.first == r.last ? absl::StrCat(r.first)
                                        : absl::StrCat(r.first, "-", r.last),
                      "/tcp");
    }
    absl::StrAppend(&cmd, " && firewall-cmd --reload", tag("firewalld"));
    out.push_back(cmd);
  }
  return out;
}

// ---------------------------------------------------------------------------
// The checks.

namespace {

// ---- Running external commands, with a deadline ----

struct ToolResult {
  bool found = false;
  bool timed_out = false;
  int exit_code = -1;
  std::string output;  // stdout and stderr together
  std::string path;
};

std::string FindExecutable(const std::string& name,
                           const std::map<std::string, std::string>& env) {
  std::vector<std::string> dirs =
      absl::StrSplit(Get(env, "PATH"), ':', absl::SkipEmpty());
  for (const char* d : {"/usr/local/sbin", "/usr/sbin", "/sbin",
                        "/usr/local/bin", "/usr/bin", "/bin"}) {
    dirs.emplace_back(d);
  }
  for (const std::string& d : dirs) {
    std::string p = absl::StrCat(d, "/", name);
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

ToolResult RunTool(const std::vector<std::string>& argv,
                   const std::map<std::string, std::string>& env,
                   absl::Duration timeout = kToolTimeout) {
  ToolResult res;
  res.path = FindExecutable(argv[0], env);
  if (res.path.empty()) return res;
  res.found = true;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return res;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<std::string> args = argv;
  args[0] = res.path;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::vector<std::string> envs;
  for (const auto& [k, v] : env) {
    if (k == "LC_ALL" || k == "LANG") continue;
    envs.push_back(absl::StrCat(k, "=", v));
  }
  envs.push_back("LC_ALL=C");
  std::vector<char*> cenv;
  for (auto& e : envs) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, res.path.c_str(), &fa, &attr, cargv.data(),
                       cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    res.output = std::strerror(rc);
    return res;
  }
  const absl::Time deadline = absl::Now() + timeout;
  char buf[4096];
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      res.timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int n = poll(&p, 1,
                 static_cast<int>(
                     std::max<int64_t>(1, absl::ToInt64Milliseconds(left))));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    ssize_t got = read(fds[0], buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    if (res.output.size() < (4u << 20)) res.output.append(buf, got);
  }
  close(fds[0]);
  if (res.timed_out) {
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
  }
  int status = 0;
  // The pipe closed (or we killed it): it exits promptly; bound the wait.
  const absl::Time reap_deadline = absl::Now() + absl::Seconds(2);
  while (true) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (absl::Now() > reap_deadline) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  if (WIFEXITED(status)) res.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) res.exit_code = 128 + WTERMSIG(status);
  return res;
}

std::string FirstLine(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  return std::string(text.substr(0, text.find('\n')));
}

bool CanBind(const std::string& address) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family = AF_INET;
  if (inet_pton(AF_INET, address.c_str(),
                &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr) == 1) {
    ss.ss_family = AF_INET;
    len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, address.c_str(),
                       &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr) == 1) {
    ss.ss_family = AF_INET6;
    family = AF_INET6;
    len = sizeof(sockaddr_in6);
  } else {
    return false;
  }
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0;
  close(fd);
  return ok;
}

// The local address the kernel would use to reach `address` (a UDP connect
// sends nothing). Empty when there is no route.
std::string SourceAddressFor(const std::string& address) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family = AF_INET;
  if (inet_pton(AF_INET, address.c_str(),
                &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr) == 1) {
    ss.ss_family = AF_INET;
    reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(9);
    len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, address.c_str(),
                       &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr) == 1) {
    ss.ss_family = AF_INET6;
    reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(9);
    family = AF_INET6;
    len = sizeof(sockaddr_in6);
  } else {
    return "";
  }
  int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0) {
    sockaddr_storage local{};
    socklen_t llen = sizeof(local);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) == 0) {
      out = SockaddrToString(reinterpret_cast<sockaddr*>(&local));
    }
  }
  close(fd);
  return out;
}

// ---- Sockets on a port, and who holds them ----

struct PortSocket {
  std::string state;  // LISTEN, ESTABLISHED, TIME_WAIT ...
  std::string local;
  std::string remote;
  std::string inode;
  int pid = 0;
  std::string command;
};

std::string TcpStateName(const std::string& hex) {
  static const std::map<std::string, std::string> kNames = {
      {"01", "ESTABLISHED"}, {"02", "SYN_SENT"},   {"03", "SYN_RECV"},
      {"04", "FIN_WAIT1"},   {"05", "FIN_WAIT2"},  {"06", "TIME_WAIT"},
      {"07", "CLOSE"},       {"08", "CLOSE_WAIT"}, {"09", "LAST_ACK"},
      {"0A", "LISTEN"},      {"0B", "CLOSING"}};
  auto it = kNames.find(hex);
  return it == kNames.end() ? hex : it->second;
}

// "0100007F:1F90" (IPv4) or 32 hex digits (IPv6) → "127.0.0.1:8080".
std::string ProcAddress(const std::string& col, int* port) {
  size_t colon = col.rfind(':');
  if (colon == std::string::npos) return col;
  unsigned int p = 0;
  absl::SimpleHexAtoi(col.substr(colon + 1), &p);
  *port = static_cast<int>(p);
  std::string hex = col.substr(0, colon);
  char buf[INET6_ADDRSTRLEN] = {0};
  if (hex.size() == 8) {
    uint32_t a = 0;
    absl::SimpleHexAtoi(hex, &a);
    in_addr in;
    in.s_addr = a;  // /proc prints the native-endian value
    inet_ntop(AF_INET, &in, buf, sizeof(buf));
    return absl::StrCat(buf, ":", p);
  }
  if (hex.size() == 32) {
    in6_addr in6;
    for (int w = 0; w < 4; ++w) {
      uint32_t v = 0;
      absl::SimpleHexAtoi(hex.substr(w * 8, 8), &v);
      std::memcpy(&in6.s6_addr[w * 4], &v, 4);
    }
    inet_ntop(AF_INET6, &in6, buf, sizeof(buf));
    return absl::StrCat("[", buf, "]:", p);
  }
  return col;
}

std::string ReadCommandLine(int pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/cmdline"));
  std::string s((std::istreambuf_iterator<char>(f)),
                std::istreambuf_iterator<char>());
  for (char& c : s) {
    if (c == '\0') c = ' ';
  }
  return std::string(absl::StripTrailingAsciiWhitespace(s));
}

// Every TCP socket of this network namespace, by local port, with its owner
// when /proc lets us see it.
class SocketTable {
 public:
  SocketTable() {
    for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
      std::ifstream f(path);
      std::string line;
      std::getline(f, line);
      while (std::getline(f, line)) {
        std::vector<std::string> cols =
            absl::StrSplit(line, ' ', absl::SkipEmpty());
        if (cols.size() < 10) continue;
        PortSocket s;
        int port = 0;
        int rport = 0;
        s.local = ProcAddress(cols[1], &port);
        s.remote = ProcAddress(cols[2], &rport);
        s.state = TcpStateName(cols[3]);
        s.inode = cols[9];
        by_port_[port].push_back(s);
      }
    }
  }

  std::vector<PortSocket> On(int port) {
    auto it = by_port_.find(port);
    if (it == by_port_.end()) return {};
    LoadOwners();
    std::vector<PortSocket> out = it->second;
    for (PortSocket& s : out) {
      auto o = owner_.find(s.inode);
      if (o != owner_.end()) {
        s.pid = o->second;
        s.command = ReadCommandLine(s.pid);
      }
    }
    return out;
  }

 private:
  void LoadOwners() {
    if (owners_loaded_) return;
    owners_loaded_ = true;
    DIR* proc = opendir("/proc");
    if (proc == nullptr) return;
    while (dirent* e = readdir(proc)) {
      int pid = 0;
      if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
      std::string fd_dir = absl::StrCat("/proc/", pid, "/fd");
      DIR* fds = opendir(fd_dir.c_str());
      if (fds == nullptr) continue;
      while (dirent* fe = readdir(fds)) {
        char target[128] = {0};
        std::string link = absl::StrCat(fd_dir, "/", fe->d_name);
        ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
        if (n <= 0) continue;
        absl::string_view t(target, static_cast<size_t>(n));
        if (absl::ConsumePrefix(&t, "socket:[") &&
            absl::ConsumeSuffix(&t, "]")) {
          owner_.emplace(std::string(t), pid);
        }
      }
      closedir(fds);
    }
    closedir(proc);
  }

  std::map<int, std::vector<PortSocket>> by_port_;
  std::map<std::string, int> owner_;
  bool owners_loaded_ = false;
};

// Whether TCP `port` can be bound on all addresses (as a server would, with
// SO_REUSEADDR). errno on failure, 0 when free.
int TryBind(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  int err = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) err = errno;
  close(fd);
  return err;
}

// ---- Targets ----

struct Target {
  std::string id;  // endpoint, master, peer
  std::string title;
  HostPort hp;
  bool local = false;
};

struct PortUse {
  PortRange range;
  std::string why;
  bool required = false;   // FAIL when taken (else WARN)
  bool muster_ok = false;  // a muster/musterd holding it is what we want
};

struct Options {
  std::string rdzv_endpoint;
  std::string master_addr;
  int master_port = 0;
  std::vector<std::string> peers;
  std::vector<PortRange> ports;
  bool json = false;
  std::string os;
  absl::Duration timeout = absl::Seconds(2);
};

nlohmann::json ProbeJson(const ProbeResult& r) {
  nlohmann::json j = {
      {"host", r.host},
      {"port", r.port},
      {"outcome", std::string(ProbeOutcomeName(r.outcome))},
      {"address", r.resolved_address},
      {"elapsed_ms", absl::ToInt64Milliseconds(r.elapsed)},
      {"detail", r.detail},
      {"errno", r.error_code},
      {"explain", r.Explain()},
  };
  if (r.icmp_type >= 0) {
    j["icmp"] = {{"type", r.icmp_type},
                 {"code", r.icmp_code},
                 {"v6", r.icmp_v6},
                 {"from", r.icmp_source},
                 {"from_this_host", r.icmp_from_this_host}};
  } else {
    j["icmp"] = nullptr;
  }
  return j;
}

std::string ShortOutcome(const ProbeResult& r) {
  const std::string ms =
      absl::StrCat(absl::ToInt64Milliseconds(r.elapsed), " ms");
  switch (r.outcome) {
    case ProbeOutcome::kOpen:
      return absl::StrCat("open: accepts connections (", ms, ")");
    case ProbeOutcome::kRefused:
      return absl::StrCat("refused: the host is up, nothing listens on port ",
                          r.port);
    case ProbeOutcome::kFiltered:
      if (absl::StrContains(r.detail, "answered ARP")) {
        return absl::StrCat(
            "filtered: the host is up but a firewall drops TCP ", r.port,
            " (no answer in ", ms, ")");
      }
      return absl::StrCat("filtered: no answer in ", ms,
                          " - a firewall DROP, a security group, a wrong "
                          "address or a host that is down");
    case ProbeOutcome::kRejected:
      if (r.icmp_type < 0) {
        return "rejected: refused by this host before sending";
      }
      return absl::StrCat("rejected: a firewall REJECT rule (",
                          absl::StrContains(r.detail, "ICMP")
                              ? r.detail.substr(r.detail.find("ICMP"))
                              : r.detail,
                          ")");
    case ProbeOutcome::kUnreachable:
      return absl::StrCat("unreachable: ", r.detail);
    case ProbeOutcome::kDnsFailure:
      return absl::StrCat("dns failure: '", r.host, "' does not resolve (",
                          r.detail, ")");
    case ProbeOutcome::kError:
      return absl::StrCat("error: ", r.detail);
  }
  return "";
}

Check TargetCheck(const Target& t, const ProbeResult& r, const Options& opt,
                  SocketTable* sockets) {
  Check c;
  c.id = t.id;
  c.title = t.title;
  c.summary = ShortOutcome(r);
  c.data = ProbeJson(r);
  c.evidence.push_back(r.Explain());
  c.evidence.push_back(absl::StrCat(
      "probe: ",
      r.resolved_address.empty() ? "(no address)" : r.resolved_address,
      " port ", r.port, ", ", absl::ToInt64Milliseconds(r.elapsed), " ms, ",
      r.detail));
  switch (r.outcome) {
    case ProbeOutcome::kOpen:
      c.status = Status::kPass;
      if (t.local) {
        for (const PortSocket& s : sockets->On(t.hp.port)) {
          if (s.state == "LISTEN" && s.pid > 0) {
            c.evidence.push_back(absl::StrCat("listening here: pid ", s.pid,
                                              " (", s.command, ") on ",
                                              s.local));
            break;
          }
        }
      }
      return c;
    case ProbeOutcome::kRefused:
      // A local endpoint with nothing on it is served by the agent started
      // here (torchrun's is_host); a remote one must be running.
      c.status = t.id == "endpoint" && !t.local ? Status::kFail : Status::kWarn;
      if (t.id == "endpoint" && t.local) {
        c.evidence.push_back(
            "the endpoint is this host: a muster agent started here embeds "
            "the rendezvous server when nothing listens (is_host); other "
            "nodes' agents fail until it does");
      }
      if (t.id != "endpoint") {
        c.evidence.push_back(
            "the path is open (a reset came back, so no firewall dropped the "
            "SYN); a master or peer port is only served while a job runs");
      }
      if (t.local) {
        for (const PortSocket& s : sockets->On(t.hp.port)) {
          if (s.state == "LISTEN") {
            c.evidence.push_back(absl::StrCat(
                "on this host port ", t.hp.port, " is served on ", s.local,
                s.pid > 0
                    ? absl::StrCat(" by pid ", s.pid, " (", s.command, ")")
                    : "",
                ", not on ", r.resolved_address));
          }
        }
      }
      c.fix.push_back(r.Fix());
      if (t.id == "endpoint") {
        c.commands.push_back(
            absl::StrCat("musterd --listen=0.0.0.0:", t.hp.port, "   # on ",
                         t.local ? "this host" : t.hp.host));
      }
      return c;
    case ProbeOutcome::kFiltered:
    case ProbeOutcome::kRejected: {
      c.status = Status::kFail;
      c.fix.push_back(r.Fix());
      const bool here = t.local || r.icmp_from_this_host;
      c.fix.push_back(absl::StrCat(
          here ? "On this host" : absl::StrCat("On ", t.hp.host),
          opt.os == "windows" ? ", in an elevated prompt:"
                              : ", as root, with the firewall it runs:"));
      for (const std::string& cmd :
           OpenPortCommands(opt.os, "", {{t.hp.port, t.hp.port}})) {
        c.commands.push_back(cmd);
      }
      return c;
    }
    case ProbeOutcome::kUnreachable:
    case ProbeOutcome::kDnsFailure:
    case ProbeOutcome::kError:
      c.status = Status::kFail;
      c.fix.push_back(r.Fix());
      return c;
  }
  return c;
}

bool IsMusterProcess(const std::string& command) {
  std::vector<std::string> words = absl::StrSplit(command, ' ');
  if (words.empty()) return false;
  std::string exe = words[0].substr(words[0].rfind('/') + 1);
  return exe == "musterd" || exe == "muster";
}

Check PortsCheck(const std::vector<PortUse>& uses, SocketTable* sockets) {
  Check c;
  c.id = "ports";
  std::vector<std::string> labels;
  int total = 0;
  for (const PortUse& u : uses) {
    labels.push_back(absl::StrCat(PortRangesText({u.range}), " (", u.why, ")"));
  }
  c.title = "local ports";
  c.evidence.push_back(absl::StrCat("checked: ", absl::StrJoin(labels, ", ")));
  nlohmann::json ports = nlohmann::json::array();
  int taken_required = 0;
  int taken_other = 0;
  int served_by_muster = 0;
  std::vector<std::string> taken_words;
  std::vector<int> pids;
  bool truncated = false;
  std::set<int> seen;
  for (const PortUse& u : uses) {
    for (int p = u.range.first; p <= u.range.last; ++p) {
      if (!seen.insert(p).second) continue;
      if (total >= kMaxPortsChecked) {
        truncated = true;
        break;
      }
      ++total;
      const int err = TryBind(p);
      if (err == 0) continue;
      nlohmann::json pj = {{"port", p},
                           {"free", false},
                           {"error", std::strerror(err)},
                           {"why", u.why}};
      nlohmann::json holders = nlohmann::json::array();
      std::vector<std::string> who;
      bool muster_holds = false;
      for (const PortSocket& s : sockets->On(p)) {
        holders.push_back({{"pid", s.pid},
                           {"command", s.command},
                           {"state", s.state},
                           {"local", s.local},
                           {"remote", s.remote}});
        std::string w = absl::StrCat(s.state, " ", s.local);
        if (s.state != "LISTEN") absl::StrAppend(&w, " <-> ", s.remote);
        if (s.pid > 0) {
          absl::StrAppend(&w, ", pid ", s.pid, " (", s.command, ")");
          if (std::find(pids.begin(), pids.end(), s.pid) == pids.end()) {
            pids.push_back(s.pid);
          }
          if (s.state == "LISTEN" && IsMusterProcess(s.command)) {
            muster_holds = true;
          }
        } else {
          absl::StrAppend(&w,
                          ", owner not visible (another user's process: "
                          "run as root)");
        }
        who.push_back(w);
      }
      pj["holders"] = holders;
      ports.push_back(pj);
      if (who.empty()) {
        who.push_back(absl::StrCat("bind failed: ", std::strerror(err)));
      }
      std::string line = absl::StrCat("port ", p, " (", u.why,
                                      ") is taken: ", absl::StrJoin(who, "; "));
      if (u.muster_ok && muster_holds) {
        ++served_by_muster;
        c.evidence.push_back(
            absl::StrCat("port ", p, " (", u.why,
                         ") is served by muster: ", absl::StrJoin(who, "; ")));
        continue;
      }
      c.evidence.push_back(line);
      taken_words.push_back(absl::StrCat(p));
      if (u.required) {
        ++taken_required;
      } else {
        ++taken_other;
      }
    }
  }
  if (truncated) {
    c.evidence.push_back(absl::StrCat("only the first ", kMaxPortsChecked,
                                      " ports were checked"));
  }
  c.data["ports"] = ports;
  c.data["checked"] = total;
  const int taken = taken_required + taken_other;
  if (taken == 0) {
    c.status = Status::kPass;
    c.summary =
        served_by_muster > 0
            ? absl::StrCat("free, or served by muster (", total, " checked)")
        : total == 1 ? std::string("free")
                     : absl::StrCat("all ", total, " free");
    return c;
  }
  c.status = taken_required > 0 ? Status::kFail : Status::kWarn;
  std::string owners;
  if (!pids.empty()) {
    std::vector<std::string> ps;
    for (int pid : pids) ps.push_back(absl::StrCat("pid ", pid));
    owners = absl::StrCat(" by ", absl::StrJoin(ps, ", "));
  }
  c.summary = absl::StrCat(
      taken == 1 ? "port " : "ports ", absl::StrJoin(taken_words, ", "),
      taken == 1 ? " is" : " are", " in use", owners,
      " ('Address already in use' for a server started there)");
  c.fix.push_back(
      "Stop the process that holds it if it is left over from an earlier run, "
      "or give the job other ports (--master-port, --rdzv-endpoint=HOST:PORT); "
      "a plain single-node `muster` picks free ephemeral ports itself.");
  for (int pid : pids) {
    std::string cmd = ReadCommandLine(pid);
    if (cmd.size() > 60) cmd = cmd.substr(0, 57) + "...";
    c.commands.push_back(absl::StrCat("kill ", pid, "   # ", cmd));
  }
  return c;
}

// ---- Host name ----

struct HostsLine {
  int number = 0;
  std::string text;
  std::string address;
};

std::vector<HostsLine> HostsEntriesFor(const std::string& hostname) {
  std::vector<HostsLine> out;
  std::ifstream f("/etc/hosts");
  std::string line;
  int n = 0;
  const std::string host = Lower(hostname);
  const std::string short_host = host.substr(0, host.find('.'));
  while (std::getline(f, line)) {
    ++n;
    absl::string_view l = line;
    l = l.substr(0, l.find('#'));
    std::vector<std::string> tok =
        absl::StrSplit(l, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (tok.size() < 2) continue;
    for (size_t i = 1; i < tok.size(); ++i) {
      const std::string name = Lower(tok[i]);
      if (name == host || name == short_host) {
        out.push_back(
            {n, std::string(absl::StripAsciiWhitespace(line)), tok[0]});
        break;
      }
    }
  }
  return out;
}

struct HostFacts {
  std::string hostname;
  int rc = 0;
  std::vector<ResolvedAddress> resolved;
};

HostFacts ResolveHostname(absl::Duration timeout) {
  HostFacts f;
  f.hostname = LocalHostname();
  std::vector<std::string> addrs;
  f.rc = ResolveAddresses(f.hostname, timeout, &addrs);
  for (const std::string& a : addrs) {
    f.resolved.push_back({a, CanBind(a), IsLoopbackText(a)});
  }
  return f;
}

nlohmann::json ChoiceJson(const InterfaceChoice& c) {
  nlohmann::json chosen = nlohmann::json::array();
  for (const InterfaceAddress& a : c.chosen) {
    chosen.push_back({{"interface", a.name}, {"address", a.address}});
  }
  return {{"chosen", chosen}, {"rule", c.rule}, {"error", c.error}};
}

std::string FirstNonLoopbackInterface(
    const std::vector<InterfaceAddress>& addrs) {
  for (const InterfaceAddress& a : addrs) {
    if (a.family == AF_INET && a.up && !a.loopback) return a.name;
  }
  return "";
}

Check HostnameCheck(const HostFacts& facts,
                    const std::vector<InterfaceAddress>& ifs,
                    const std::map<std::string, std::string>& env,
                    bool multi_node) {
  Check c;
  c.id = "hostname";
  c.title = absl::StrCat("host name ", facts.hostname);
  const std::vector<HostsLine> hosts = HostsEntriesFor(facts.hostname);
  for (const HostsLine& h : hosts) {
    c.evidence.push_back(absl::StrCat("/etc/hosts:", h.number, ": ", h.text));
  }
  std::vector<std::string> addr_words;
  nlohmann::json resolved = nlohmann::json::array();
  for (const ResolvedAddress& r : facts.resolved) {
    addr_words.push_back(
        absl::StrCat(r.address, r.loopback ? " (loopback)" : "",
                     r.bindable ? "" : " (not an address of this host)"));
    resolved.push_back({{"address", r.address},
                        {"loopback", r.loopback},
                        {"bindable", r.bindable}});
  }
  c.data["hostname"] = facts.hostname;
  c.data["resolved"] = resolved;
  if (facts.rc != 0) {
    c.evidence.push_back(absl::StrCat("getaddrinfo(", facts.hostname,
                                      "): ", gai_strerror(facts.rc)));
  } else {
    c.evidence.push_back(absl::StrCat("getaddrinfo(", facts.hostname,
                                      ") = ", absl::StrJoin(addr_words, ", ")));
  }
  const InterfaceChoice gloo =
      PytorchGlooDevice(ifs, env, facts.hostname, facts.resolved);
  const InterfaceChoice nccl = NcclSocketInterfaces(ifs, env);
  c.data["gloo"] = ChoiceJson(gloo);
  c.data["nccl"] = ChoiceJson(nccl);
  const std::string gloo_addr =
      gloo.chosen.empty() ? "" : gloo.chosen.front().address;
  const bool gloo_loopback = IsLoopbackText(gloo_addr);
  const std::string nccl_words =
      nccl.chosen.empty() ? "no interface" : Describe(nccl.chosen.front());
  const std::string good_if =
      !nccl.chosen.empty() && !nccl.chosen.front().loopback
          ? nccl.chosen.front().name
          : FirstNonLoopbackInterface(ifs);
  std::string good_addr;
  for (const InterfaceAddress& a : ifs) {
    if (a.name == good_if && a.family == AF_INET) {
      good_addr = a.address;
      break;
    }
  }
  const bool gloo_env = !Get(env, "GLOO_SOCKET_IFNAME").empty();
  bool trap = false;
  for (const ResolvedAddress& r : facts.resolved) {
    if (r.bindable) {
      trap = r.loopback;
      break;
    }
  }
  c.data["loopback_trap"] = trap;
  std::string loop_addr;
  for (const ResolvedAddress& r : facts.resolved) {
    if (r.loopback) {
      loop_addr = r.address;
      break;
    }
  }
  if (facts.rc != 0 || facts.resolved.empty() || trap) {
    if (facts.rc != 0 || facts.resolved.empty()) {
      c.summary = absl::StrCat("'", facts.hostname,
                               "' does not resolve: PyTorch's Gloo falls back "
                               "to loopback");
    } else {
      c.summary = absl::StrCat(
          "'", facts.hostname, "' resolves to ", loop_addr,
          ", a loopback address (the 127.0.1.1 trap): Gloo would bind ",
          gloo_addr, gloo_env ? " unless GLOO_SOCKET_IFNAME is used" : "");
    }
    c.evidence.push_back(absl::StrCat(
        "PyTorch's Gloo (", gloo.rule, ") binds ",
        gloo_addr.empty() ? "nothing" : gloo_addr,
        gloo_loopback
            ? " and tells the other ranks to connect there: on another node "
              "that address is the node itself, so they connect to "
              "themselves, time out or hang"
            : ""));
    c.evidence.push_back(absl::StrCat(
        "NCCL does not use the host name; it picks by interface: ", nccl_words,
        " (", nccl.rule, ")"));
    if (gloo_env && !gloo_loopback) {
      c.status = Status::kPass;
      c.summary =
          absl::StrCat("'", facts.hostname, "' resolves to ",
                       loop_addr.empty() ? "nothing" : loop_addr,
                       ", but GLOO_SOCKET_IFNAME makes Gloo bind ", gloo_addr);
      return c;
    }
    c.status = multi_node ? Status::kFail : Status::kWarn;
    if (!multi_node) {
      c.evidence.push_back(
          "harmless while every rank runs on this node; fatal for a "
          "multi-node job");
    }
    if (!good_addr.empty()) {
      if (trap && !hosts.empty() && hosts.front().address == loop_addr) {
        c.fix.push_back(absl::StrCat(
            "Map the host name to the address peers reach: in /etc/hosts "
            "change line ",
            hosts.front().number, " '", hosts.front().text, "' to '", good_addr,
            " ", facts.hostname, "' (keep 'localhost' on 127.0.0.1)."));
      } else {
        c.fix.push_back(absl::StrCat("Map the host name to ", good_addr,
                                     " in DNS or /etc/hosts."));
      }
      c.fix.push_back(
          absl::StrCat("Or pin the interface for every rank on every node:"));
      c.commands.push_back(absl::StrCat("export GLOO_SOCKET_IFNAME=", good_if,
                                        " NCCL_SOCKET_IFNAME=", good_if));
    } else {
      c.fix.push_back(
          "This host has no non-loopback interface that is up: connect it to "
          "the network the other nodes are on.");
    }
    return c;
  }
  c.status = Status::kPass;
  c.summary = absl::StrCat("'", facts.hostname, "' resolves to ",
                           addr_words.front(), "; Gloo binds ", gloo_addr);
  c.evidence.push_back(absl::StrCat("PyTorch's Gloo: ", gloo.rule, ": ",
                                    DescribeAll(gloo.chosen)));
  return c;
}

// ---- Interfaces ----

Check InterfacesCheck(const std::vector<InterfaceAddress>& ifs,
                      const HostFacts& facts,
                      const std::map<std::string, std::string>& env,
                      const std::vector<std::string>& peer_addresses,
                      bool multi_node) {
  Check c;
  c.id = "interfaces";
  c.title = "interfaces (Gloo, NCCL)";
  // One line per interface.
  std::vector<std::string> order;
  std::map<std::string, std::vector<const InterfaceAddress*>> by_name;
  for (const InterfaceAddress& a : ifs) {
    if (by_name.find(a.name) == by_name.end()) order.push_back(a.name);
    by_name[a.name].push_back(&a);
  }
  nlohmann::json list = nlohmann::json::array();
  for (const std::string& name : order) {
    const auto& v = by_name[name];
    std::vector<std::string> addrs;
    nlohmann::json ja = nlohmann::json::array();
    for (const InterfaceAddress* a : v) {
      addrs.push_back(absl::StrCat(a->address, "/", a->prefix_len));
      ja.push_back(absl::StrCat(a->address, "/", a->prefix_len));
    }
    const InterfaceAddress& f = *v.front();
    std::string state = !f.up ? "DOWN" : f.running ? "UP" : "UP, NO-CARRIER";
    c.evidence.push_back(
        absl::StrCat(name, " ", state, ": ", absl::StrJoin(addrs, " ")));
    list.push_back({{"name", name},
                    {"up", f.up},
                    {"running", f.running},
                    {"loopback", f.loopback},
                    {"addresses", ja}});
  }
  c.data["interfaces"] = list;
  const InterfaceChoice nccl = NcclSocketInterfaces(ifs, env);
  const InterfaceChoice gloo =
      PytorchGlooDevice(ifs, env, facts.hostname, facts.resolved);
  const InterfaceChoice comm =
      MusterCommDevice(ifs, env, DefaultAdvertisedAddress());
  c.data["nccl"] = ChoiceJson(nccl);
  c.data["gloo"] = ChoiceJson(gloo);
  c.data["muster_comm"] = ChoiceJson(comm);
  auto words = [](const InterfaceChoice& ch) {
    return ch.chosen.empty() ? std::string("none") : DescribeAll(ch.chosen);
  };
  c.evidence.push_back(absl::StrCat(
      "NCCL: bootstrap ",
      nccl.chosen.empty() ? "none" : Describe(nccl.chosen.front()),
      nccl.chosen.size() > 1 ? absl::StrCat("; sockets ", words(nccl)) : "",
      " (", nccl.rule, ")"));
  c.evidence.push_back(
      absl::StrCat("PyTorch Gloo: ", words(gloo), " (", gloo.rule, ")"));
  c.evidence.push_back(
      absl::StrCat("libmuster_comm: ", words(comm), " (", comm.rule, ")"));
  std::vector<std::string> fails;
  std::vector<std::string> warns;
  for (const InterfaceChoice* ch : {&nccl, &gloo, &comm}) {
    if (!ch->error.empty()) fails.push_back(ch->error);
  }
  if (!nccl.chosen.empty() && nccl.error.empty()) {
    const InterfaceAddress& b = nccl.chosen.front();
    if (b.loopback || absl::StartsWith(b.name, "docker") ||
        absl::StartsWith(b.name, "virbr")) {
      std::string w = absl::StrCat("NCCL would use ", Describe(b),
                                   ", which other nodes cannot reach");
      (multi_node ? warns : c.evidence).push_back(w);
    }
  }
  for (const InterfaceChoice* ch : {&gloo, &comm}) {
    for (const InterfaceAddress& a : ch->chosen) {
      if (!a.up && !a.loopback && a.name != "?") {
        warns.push_back(absl::StrCat(Describe(a), " is down"));
      }
    }
  }
  // Whether the chosen addresses are the ones this host uses to reach peers.
  nlohmann::json routes = nlohmann::json::array();
  for (const std::string& peer : peer_addresses) {
    if (IsLoopbackText(peer)) continue;
    const std::string src = SourceAddressFor(peer);
    std::string via = "?";
    for (const InterfaceAddress& a : ifs) {
      if (a.address == src) via = a.name;
    }
    routes.push_back({{"peer", peer}, {"source", src}, {"interface", via}});
    if (src.empty()) {
      warns.push_back(absl::StrCat("no route from this host to ", peer));
      continue;
    }
    c.evidence.push_back(
        absl::StrCat("route to ", peer, ": from ", via, " ", src));
    struct Named {
      const char* name;
      const InterfaceChoice* ch;
      const char* var;
    };
    for (const Named& n : {Named{"NCCL", &nccl, "NCCL_SOCKET_IFNAME"},
                           Named{"Gloo", &gloo, "GLOO_SOCKET_IFNAME"}}) {
      if (n.ch->chosen.empty()) continue;
      const InterfaceAddress& a = n.ch->chosen.front();
      if (a.family !=
          (peer.find(':') != std::string::npos ? AF_INET6 : AF_INET))
        continue;
      if (a.address != src) {
        warns.push_back(absl::StrCat(
            n.name, " binds ", Describe(a), " but this host reaches ", peer,
            " from ", via, " ", src, ": ", peer, " must be able to reach ",
            a.address, " (else set ", n.var, "=", via, ")"));
      }
    }
  }
  c.data["routes"] = routes;
  for (const std::string& f : fails) c.evidence.push_back(f);
  for (const std::string& w : warns) c.evidence.push_back(w);
  if (!fails.empty()) {
    c.status = Status::kFail;
    c.summary = fails.front();
    c.fix.push_back(
        "Name an interface that exists here (see the list above), or unset "
        "the variable to let the library choose:");
    std::string good = FirstNonLoopbackInterface(ifs);
    if (!good.empty()) {
      c.commands.push_back(absl::StrCat("export NCCL_SOCKET_IFNAME=", good,
                                        " GLOO_SOCKET_IFNAME=", good));
    }
    return c;
  }
  if (!warns.empty()) {
    c.status = Status::kWarn;
    c.summary = warns.front();
    std::string good = FirstNonLoopbackInterface(ifs);
    for (const std::string& peer : peer_addresses) {
      const std::string src = SourceAddressFor(peer);
      for (const InterfaceAddress& a : ifs) {
        if (!src.empty() && a.address == src && !a.loopback) good = a.name;
      }
    }
    c.fix.push_back(
        "Pin Gloo and NCCL to the interface the nodes reach each other on, "
        "the same on every node:");
    if (!good.empty()) {
      c.commands.push_back(absl::StrCat("export NCCL_SOCKET_IFNAME=", good,
                                        " GLOO_SOCKET_IFNAME=", good));
    }
    return c;
  }
  c.status = Status::kPass;
  c.summary = absl::StrCat(
      "NCCL ", nccl.chosen.empty() ? "none" : Describe(nccl.chosen.front()),
      "; Gloo ", words(gloo));
  return c;
}

// ---- Firewall ----

std::vector<PortRange> EphemeralRange() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  int a = 0, b = 0;
  if (f >> a >> b && a > 0 && b >= a) return {{a, b}};
  return {{32768, 60999}};
}

Check FirewallCheck(const std::vector<PortRange>& ports, const Options& opt,
                    const std::map<std::string, std::string>& env,
                    bool multi_node) {
  Check c;
  c.id = "firewall";
  c.title = absl::StrCat("firewall, TCP ", PortRangesText(ports));
  FirewallRuleset rules;
  std::vector<std::string> unreadable;
  std::vector<std::string> present;
  std::string tool;  // what the fix commands use
  bool firewalld_running = false;
  bool ufw_active = false;
  nlohmann::json tools = nlohmann::json::object();

  // nftables.
  ToolResult nft = RunTool({"nft", "list", "ruleset"}, env);
  if (!nft.found) {
    c.evidence.push_back("nft: not installed");
    tools["nft"] = "absent";
  } else if (nft.timed_out || nft.exit_code != 0) {
    unreadable.push_back("nft");
    c.evidence.push_back(absl::StrCat(
        "nft list ruleset: ",
        nft.timed_out ? "no answer in 5 s" : FirstLine(nft.output)));
    tools["nft"] = "unreadable";
  } else {
    present.push_back("nft");
    FirewallRuleset n = ParseNftRuleset(nft.output);
    int count = static_cast<int>(n.rules.size());
    c.evidence.push_back(
        absl::StrCat("nft: ", count, " rules in native tables",
                     n.nft_input_chain.empty()
                         ? ""
                         : absl::StrCat(", input chain ", n.nft_input_chain)));
    tools["nft"] = {{"rules", count}, {"input_chain", n.nft_input_chain}};
    rules.nft_input_chain = n.nft_input_chain;
    for (auto& ch : n.chains) rules.chains.push_back(ch);
    for (auto& r : n.rules) rules.rules.push_back(r);
  }
  // iptables (legacy or nft backend) and ip6tables.
  for (const char* name : {"iptables", "ip6tables"}) {
    ToolResult ipt = RunTool({name, "-S"}, env);
    if (!ipt.found) {
      c.evidence.push_back(absl::StrCat(name, ": not installed"));
      tools[name] = "absent";
      continue;
    }
    if (ipt.timed_out || ipt.exit_code != 0) {
      unreadable.push_back(name);
      c.evidence.push_back(absl::StrCat(
          name,
          " -S: ", ipt.timed_out ? "no answer in 5 s" : FirstLine(ipt.output)));
      tools[name] = "unreadable";
      continue;
    }
    present.push_back(name);
    FirewallRuleset r = ParseIptablesRules(ipt.output, name);
    std::string policy = "ACCEPT";
    for (const auto& ch : r.chains) {
      if (ch.input_hook) policy = ch.policy;
    }
    c.evidence.push_back(absl::StrCat(name, ": INPUT policy ", policy, ", ",
                                      r.rules.size(), " rules"));
    tools[name] = {{"rules", r.rules.size()}, {"input_policy", policy}};
    for (auto& ch : r.chains) rules.chains.push_back(ch);
    for (auto& x : r.rules) rules.rules.push_back(x);
  }
  // ufw.
  ToolResult ufw = RunTool({"ufw", "status"}, env);
  if (!ufw.found) {
    tools["ufw"] = "absent";
    c.evidence.push_back("ufw: not installed");
  } else if (ufw.timed_out || ufw.exit_code != 0) {
    tools["ufw"] = "unreadable";
    c.evidence.push_back(
        absl::StrCat("ufw status: ", ufw.timed_out ? "no answer in 5 s"
                                                   : FirstLine(ufw.output)));
  } else {
    ufw_active = absl::StrContains(ufw.output, "Status: active");
    tools["ufw"] = ufw_active ? "active" : "inactive";
    c.evidence.push_back(
        absl::StrCat("ufw: ", ufw_active ? "active" : "inactive"));
    if (ufw_active) {
      for (absl::string_view l : absl::StrSplit(ufw.output, '\n')) {
        for (const PortRange& p : ports) {
          if (absl::StrContains(l, absl::StrCat(p.first))) {
            c.evidence.push_back(
                absl::StrCat("ufw rule: ", absl::StripAsciiWhitespace(l)));
            break;
          }
        }
      }
    }
  }
  // firewalld.
  std::vector<PortRange> firewalld_open;
  ToolResult fwd = RunTool({"firewall-cmd", "--state"}, env);
  if (!fwd.found) {
    tools["firewalld"] = "absent";
    c.evidence.push_back("firewalld: not installed");
  } else if (fwd.timed_out || fwd.exit_code != 0) {
    tools["firewalld"] = "not running";
    c.evidence.push_back(
        absl::StrCat("firewalld: ", fwd.timed_out ? "no answer in 5 s"
                                                  : FirstLine(fwd.output)));
  } else {
    firewalld_running = true;
    tools["firewalld"] = "running";
    ToolResult lp = RunTool({"firewall-cmd", "--list-ports"}, env);
    ToolResult ls = RunTool({"firewall-cmd", "--list-services"}, env);
    c.evidence.push_back(absl::StrCat("firewalld (default zone): ports '",
                                      FirstLine(lp.output), "', services '",
                                      FirstLine(ls.output), "'"));
    for (absl::string_view item :
         absl::StrSplit(FirstLine(lp.output), ' ', absl::SkipEmpty())) {
      if (!absl::ConsumeSuffix(&item, "/tcp")) continue;
      PortRange pr;
      if (ParseOnePortRange(item, &pr)) firewalld_open.push_back(pr);
    }
  }
  c.data["tools"] = tools;
  if (firewalld_running) {
    tool = "firewalld";
  } else if (ufw_active) {
    tool = "ufw";
  } else if (!rules.nft_input_chain.empty()) {
    tool = "nft";
  } else if (std::find(present.begin(), present.end(), "iptables") !=
             present.end()) {
    tool = "iptables";
  }

  // Decide each port.
  std::vector<PortRange> blocked;
  std::vector<std::string> maybe;
  std::map<std::string, std::vector<PortRange>> blocked_by;
  nlohmann::json decisions = nlohmann::json::array();
  int total = 0;
  for (const PortRange& r : ports) {
    for (int p = r.first; p <= r.last && total < kMaxPortsChecked;
         ++p, ++total) {
      PortDecision d = DecidePort(rules, p);
      if (firewalld_running && d.kind == PortDecision::kAllowed) {
        bool open = false;
        for (const PortRange& o : firewalld_open) open = open || o.Contains(p);
        if (!open) {
          d.kind = PortDecision::kMaybe;
          d.by =
              "firewalld's default zone does not list the port (a service it "
              "lists may cover it)";
        }
      }
      if (d.kind == PortDecision::kAllowed) continue;
      decisions.push_back(
          {{"port", p},
           {"decision", d.kind == PortDecision::kBlocked ? "blocked" : "maybe"},
           {"by", d.by}});
      if (d.kind == PortDecision::kBlocked) {
        if (blocked.empty() || blocked.back().last != p - 1) {
          blocked.push_back({p, p});
        } else {
          blocked.back().last = p;
        }
        auto& v = blocked_by[d.by];
        if (v.empty() || v.back().last != p - 1) {
          v.push_back({p, p});
        } else {
          v.back().last = p;
        }
      } else if (std::find(maybe.begin(), maybe.end(), d.by) == maybe.end()) {
        maybe.push_back(d.by);
      }
    }
  }
  c.data["decisions"] = decisions;
  for (const auto& [by, rs] : blocked_by) {
    c.evidence.push_back(
        absl::StrCat("blocks TCP ", PortRangesText(rs), ": ", by));
  }
  for (const std::string& m : maybe) {
    c.evidence.push_back(absl::StrCat("may block: ", m));
  }
  // Gloo and NCCL listen on ephemeral ports.
  const std::vector<PortRange> eph = EphemeralRange();
  const int mid = (eph[0].first + eph[0].last) / 2;
  PortDecision de = DecidePort(rules, mid);
  bool eph_blocked = de.kind == PortDecision::kBlocked;
  if (eph_blocked) {
    c.evidence.push_back(absl::StrCat(
        "Gloo and NCCL connect ranks on ephemeral ports (", PortRangesText(eph),
        ", net.ipv4.ip_local_port_range), and ", de.by,
        " blocks them: collectives across nodes would hang"));
  }
  const bool os_windows = opt.os == "windows";
  std::string where = os_windows
                          ? "on each Windows node, in an elevated prompt:"
                          : "as root on this host:";
  if (!blocked.empty()) {
    c.status = Status::kFail;
    c.summary = absl::StrCat("this host's firewall blocks inbound TCP ",
                             PortRangesText(blocked));
    c.fix.push_back(absl::StrCat("Allow the ports in, ", where));
    c.commands = OpenPortCommands(opt.os, os_windows ? "" : tool, blocked,
                                  rules.nft_input_chain);
  } else if (!maybe.empty() || eph_blocked || !unreadable.empty()) {
    c.status = Status::kWarn;
    if (!unreadable.empty()) {
      c.summary = absl::StrCat("could not read the rules of ",
                               absl::StrJoin(unreadable, ", "),
                               geteuid() != 0 ? " (run as root)" : "");
    } else if (!maybe.empty()) {
      c.summary = absl::StrCat("rules may block some peers: ", maybe.front());
    } else {
      c.summary = absl::StrCat(
          "the ports are open but ephemeral ports (Gloo/NCCL data) are "
          "blocked");
    }
    c.fix.push_back(absl::StrCat("To allow the ports explicitly, ", where));
    c.commands = OpenPortCommands(opt.os, os_windows ? "" : tool, ports,
                                  rules.nft_input_chain);
  } else {
    c.status = Status::kPass;
    c.summary =
        present.empty() && !firewalld_running && !ufw_active
            ? "no firewall tool found here; nothing local filters the ports"
            : absl::StrCat("no local rule blocks inbound TCP ",
                           PortRangesText(ports));
    c.fix.push_back(absl::StrCat(
        "If peers still see the ports filtered, the block is elsewhere (the "
        "peer's own firewall, a cloud security group). To allow them "
        "explicitly, ",
        where));
    c.commands = OpenPortCommands(opt.os, os_windows ? "" : tool, ports,
                                  rules.nft_input_chain);
  }
  if (eph_blocked) {
    c.fix.push_back(
        "Allow all TCP between the nodes (e.g. from their subnet), not only "
        "the muster ports:");
    if (os_windows) {
      c.commands.push_back(
          "New-NetFirewallRule -DisplayName \"muster cluster\" -Direction "
          "Inbound -Protocol TCP -RemoteAddress 10.0.0.0/24 -Action Allow   # "
          "your nodes' subnet");
    } else {
      c.commands.push_back(
          "iptables -I INPUT -p tcp -s 10.0.0.0/24 -j ACCEPT   # your nodes' "
          "subnet");
    }
  }
  if (multi_node && c.status == Status::kWarn && eph_blocked) {
    c.status = Status::kFail;
  }
  return c;
}

// ---- Environment ----

Check EnvironmentCheck(const std::map<std::string, std::string>& env,
                       const Options& opt) {
  Check c;
  c.id = "environment";
  c.title = "environment";
  static const char* const kVars[] = {"RANK",
                                      "WORLD_SIZE",
                                      "LOCAL_RANK",
                                      "LOCAL_WORLD_SIZE",
                                      "GROUP_RANK",
                                      "GROUP_WORLD_SIZE",
                                      "ROLE_RANK",
                                      "MASTER_ADDR",
                                      "MASTER_PORT",
                                      "TORCHELASTIC_RUN_ID",
                                      "TORCHELASTIC_RESTART_COUNT",
                                      "MUSTER_RUN_ID",
                                      "MUSTER_STORE_ENDPOINT",
                                      "MUSTER_ROUND"};
  nlohmann::json set = nlohmann::json::object();
  std::vector<std::string> present;
  for (const char* v : kVars) {
    if (const std::string* val = Find(env, v)) {
      set[v] = *val;
      present.push_back(absl::StrCat(v, "=", *val));
    }
  }
  std::vector<std::string> pet;
  for (const auto& [k, v] : env) {
    if (absl::StartsWith(k, "PET_")) pet.push_back(absl::StrCat(k, "=", v));
  }
  c.data["set"] = set;
  c.data["pet"] = pet;
  std::vector<std::string> fails;
  std::vector<std::string> warns;
  auto number = [&](const char* key, int* out) {
    const std::string* v = Find(env, key);
    if (v == nullptr) return false;
    if (!absl::SimpleAtoi(*v, out) || *out < 0) {
      fails.push_back(absl::StrCat(key, "='", *v, "' is not a number >= 0"));
      return false;
    }
    return true;
  };
  int rank = 0, world = 0, local = 0, local_world = 0, mport = 0;
  const bool has_rank = number("RANK", &rank);
  const bool has_world = number("WORLD_SIZE", &world);
  const bool has_local = number("LOCAL_RANK", &local);
  const bool has_local_world = number("LOCAL_WORLD_SIZE", &local_world);
  if (has_rank && has_world && rank >= world) {
    fails.push_back(
        absl::StrCat("RANK=", rank, " is not below WORLD_SIZE=", world));
  }
  if (has_local && has_local_world && local >= local_world) {
    fails.push_back(absl::StrCat(
        "LOCAL_RANK=", local, " is not below LOCAL_WORLD_SIZE=", local_world));
  }
  if (has_world && has_local_world && local_world > world) {
    fails.push_back(absl::StrCat("LOCAL_WORLD_SIZE=", local_world,
                                 " exceeds WORLD_SIZE=", world));
  }
  if (const std::string* mp = Find(env, "MASTER_PORT")) {
    if (!absl::SimpleAtoi(*mp, &mport) || mport < 1 || mport > 65535) {
      fails.push_back(
          absl::StrCat("MASTER_PORT='", *mp, "' is not a port in 1..65535"));
    } else if (opt.master_port != 0 && mport != opt.master_port) {
      warns.push_back(
          absl::StrCat("MASTER_PORT=", mport,
                       " differs from --master-port=", opt.master_port));
    }
  }
  if (const std::string* ma = Find(env, "MASTER_ADDR")) {
    if (!opt.master_addr.empty() && *ma != opt.master_addr) {
      warns.push_back(
          absl::StrCat("MASTER_ADDR=", *ma,
                       " differs from --master-addr=", opt.master_addr));
    }
  }
  const std::string run_id = !Get(env, "MUSTER_RUN_ID").empty()
                                 ? Get(env, "MUSTER_RUN_ID")
                                 : Get(env, "TORCHELASTIC_RUN_ID");
  if (!run_id.empty()) {
    warns.push_back(absl::StrCat(
        "this shell looks like a worker of job '", run_id,
        "' (a launcher set TORCHELASTIC_RUN_ID/MUSTER_RUN_ID): a muster "
        "started here launches a nested job"));
  } else if (!present.empty()) {
    warns.push_back(
        "rank variables are exported in this shell (stale exports?): muster "
        "gives its workers fresh values, but a program started without it, "
        "or init_process_group(init_method='env://') run by hand, uses these");
  }
  if (!pet.empty()) {
    warns.push_back(absl::StrCat(
        "PET_* variables set muster's flags when the flag is not given: ",
        absl::StrJoin(pet, " ")));
  }
  if (!present.empty()) {
    c.evidence.push_back(absl::StrCat("set: ", absl::StrJoin(present, " ")));
  }
  for (const auto& f : fails) c.evidence.push_back(f);
  for (const auto& w : warns) c.evidence.push_back(w);
  if (!fails.empty()) {
    c.status = Status::kFail;
    c.summary = absl::StrCat("conflicting rank variables: ", fails.front());
  } else if (!warns.empty()) {
    c.status = Status::kWarn;
    c.summary =
        present.empty()
            ? "PET_* variables change muster's flags"
            : absl::StrCat(present.size(), " rank variable(s) already set: ",
                           absl::StrJoin(present, " "));
  } else {
    c.status = Status::kPass;
    c.summary =
        "no RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR or MASTER_PORT "
        "set";
    return c;
  }
  std::vector<std::string> names;
  for (const char* v : kVars) {
    if (Find(env, v) != nullptr) names.push_back(v);
  }
  for (const auto& p : pet) names.push_back(p.substr(0, p.find('=')));
  c.fix.push_back(
      "Unset them unless this shell is meant to be a worker (run muster from "
      "a clean shell):");
  c.commands.push_back(absl::StrCat("unset ", absl::StrJoin(names, " ")));
  return c;
}

// ---- GPUs, CUDA, NCCL ----

struct Dl {
  explicit Dl(const char* name) : h(dlopen(name, RTLD_NOW | RTLD_LOCAL)) {
    if (h == nullptr) {
      const char* e = dlerror();
      error = e != nullptr ? e : "not found";
    }
  }
  ~Dl() {
    // libcuda and libnccl are left loaded: unloading a driver library that
    // started threads is unsafe, and the process exits soon.
  }
  void* h = nullptr;
  std::string error;
  template <typename F>
  F Sym(const char* name) {
    return h == nullptr ? nullptr : reinterpret_cast<F>(dlsym(h, name));
  }
};

std::string DlPath(void* sym) {
  Dl_info info;
  if (sym != nullptr && dladdr(sym, &info) != 0 && info.dli_fname != nullptr) {
    return info.dli_fname;
  }
  return "";
}

struct CudaFacts {
  bool loaded = false;
  std::string error;
  std::string path;
  int driver_version = 0;
  int init_rc = -1;
  std::string init_error;
  int devices = 0;
  std::vector<std::string> names;
  bool timed_out = false;
};

CudaFacts ProbeCuda(absl::Duration timeout) {
  struct Shared {
    absl::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
    CudaFacts facts ABSL_GUARDED_BY(mu);
  };
  auto shared = std::make_shared<Shared>();
  std::thread([shared] {
    CudaFacts f;
    auto* dl = new Dl("libcuda.so.1");  // never unloaded, see ~Dl
    if (dl->h == nullptr) {
      f.error = dl->error;
    } else {
      f.loaded = true;
      using IntFn = int (*)(int*);
      using InitFn = int (*)(unsigned int);
      using NameFn = int (*)(char*, int, int);
      using ErrFn = int (*)(int, const char**);
      auto version = dl->Sym<IntFn>("cuDriverGetVersion");
      auto init = dl->Sym<InitFn>("cuInit");
      auto count = dl->Sym<IntFn>("cuDeviceGetCount");
      auto name = dl->Sym<NameFn>("cuDeviceGetName");
      auto err_name = dl->Sym<ErrFn>("cuGetErrorName");
      f.path = DlPath(reinterpret_cast<void*>(init));
      if (version != nullptr) version(&f.driver_version);
      if (init != nullptr) {
        f.init_rc = init(0);
        if (f.init_rc != 0 && err_name != nullptr) {
          const char* s = nullptr;
          if (err_name(f.init_rc, &s) == 0 && s != nullptr) f.init_error = s;
        }
        if (f.init_rc == 0 && count != nullptr) {
          count(&f.devices);
          for (int i = 0; i < f.devices && name != nullptr; ++i) {
            char buf[256] = {0};
            if (name(buf, sizeof(buf) - 1, i) == 0) f.names.push_back(buf);
          }
        }
      }
    }
    absl::MutexLock l(&shared->mu);
    shared->facts = f;
    shared->done = true;
  }).detach();
  absl::MutexLock l(&shared->mu);
  if (!shared->mu.AwaitWithTimeout(absl::Condition(&shared->done), timeout)) {
    CudaFacts f;
    f.timed_out = true;
    return f;
  }
  return shared->facts;
}

std::string NcclVersionText(int code) {
  int major, minor, patch;
  if (code >= 10000) {
    major = code / 10000;
    minor = (code % 10000) / 100;
    patch = code % 100;
  } else {
    major = code / 1000;
    minor = (code % 1000) / 100;
    patch = code % 100;
  }
  return absl::StrCat(major, ".", minor, ".", patch);
}

Check GpuCheck(const std::map<std::string, std::string>& env) {
  Check c;
  c.id = "gpu";
  c.title = "CUDA driver, GPUs, NCCL";
  // Kernel module.
  std::string module_version;
  {
    std::ifstream f("/proc/driver/nvidia/version");
    std::string line;
    if (std::getline(f, line)) {
      module_version = std::string(absl::StripAsciiWhitespace(line));
      c.evidence.push_back(
          absl::StrCat("/proc/driver/nvidia/version: ", module_version));
    } else {
      c.evidence.push_back(
          "/proc/driver/nvidia/version: absent (no NVIDIA kernel module)");
    }
  }
  // Device nodes.
  int dev_nodes = 0;
  bool ctl = access("/dev/nvidiactl", F_OK) == 0;
  if (DIR* d = opendir("/dev")) {
    while (dirent* e = readdir(d)) {
      absl::string_view n = e->d_name;
      int idx = 0;
      if (absl::ConsumePrefix(&n, "nvidia") && absl::SimpleAtoi(n, &idx)) {
        ++dev_nodes;
      }
    }
    closedir(d);
  }
  c.evidence.push_back(
      absl::StrCat("/dev/nvidia[0-9]*: ", dev_nodes,
                   ctl ? ", /dev/nvidiactl present" : ", no /dev/nvidiactl"));
  CudaFacts cuda = ProbeCuda(absl::Seconds(20));
  if (cuda.timed_out) {
    c.evidence.push_back("libcuda.so.1: cuInit did not return in 20 s");
  } else if (!cuda.loaded) {
    c.evidence.push_back(absl::StrCat("libcuda.so.1: ", cuda.error));
  } else {
    c.evidence.push_back(absl::StrCat(
        "libcuda.so.1: ", cuda.path, ", driver API ",
        cuda.driver_version / 1000, ".", (cuda.driver_version % 1000) / 10,
        ", cuInit: ",
        cuda.init_rc == 0 ? "ok"
                          : absl::StrCat(cuda.init_rc, " ", cuda.init_error),
        cuda.init_rc == 0 ? absl::StrCat(", ", cuda.devices, " GPU(s)") : ""));
    for (size_t i = 0; i < cuda.names.size(); ++i) {
      c.evidence.push_back(absl::StrCat("GPU ", i, ": ", cuda.names[i]));
    }
  }
  // NCCL.
  std::string nccl_version;
  std::string nccl_path;
  {
    auto* dl = new Dl("libnccl.so.2");  // never unloaded, see ~Dl
    if (dl->h == nullptr) {
      c.evidence.push_back(absl::StrCat("libnccl.so.2: ", dl->error));
    } else {
      using VerFn = int (*)(int*);
      auto ver = dl->Sym<VerFn>("ncclGetVersion");
      int code = 0;
      if (ver != nullptr && ver(&code) == 0)
        nccl_version = NcclVersionText(code);
      nccl_path = DlPath(reinterpret_cast<void*>(ver));
      c.evidence.push_back(
          absl::StrCat("libnccl.so.2: ", nccl_path, ", NCCL ",
                       nccl_version.empty() ? "?" : nccl_version));
    }
  }
  const std::string* visible = Find(env, "CUDA_VISIBLE_DEVICES");
  if (visible != nullptr) {
    c.evidence.push_back(absl::StrCat("CUDA_VISIBLE_DEVICES='", *visible, "'"));
  }
  c.data = {{"kernel_module", module_version},
            {"device_nodes", dev_nodes},
            {"libcuda", cuda.loaded ? cuda.path : ""},
            {"driver_api_version", cuda.driver_version},
            {"cuinit", cuda.init_rc},
            {"cuinit_error", cuda.init_error},
            {"gpus", cuda.devices},
            {"gpu_names", cuda.names},
            {"nccl_version", nccl_version},
            {"nccl_path", nccl_path}};
  const bool has_driver = !module_version.empty() || dev_nodes > 0;
  if (!has_driver && !cuda.loaded) {
    c.status = Status::kInfo;
    c.summary = absl::StrCat(
        "no NVIDIA driver or GPU: CPU training with Gloo",
        nccl_version.empty() ? ""
                             : absl::StrCat(" (NCCL ", nccl_version,
                                            " is installed but needs a GPU)"));
    return c;
  }
  if (cuda.timed_out) {
    c.status = Status::kFail;
    c.summary = "cuInit hangs: the driver is stuck";
    c.fix.push_back(
        "Check `nvidia-smi` and the kernel log (dmesg); a reboot "
        "or driver reload usually clears it.");
    return c;
  }
  if (!cuda.loaded) {
    c.status = Status::kFail;
    c.summary =
        "an NVIDIA kernel module or devices are present but "
        "libcuda.so.1 cannot be loaded";
    c.fix.push_back(
        "Install the user-space driver that matches the kernel module "
        "(libcuda1 / nvidia-driver), or in a container run with the NVIDIA "
        "container toolkit (--gpus all).");
    return c;
  }
  if (cuda.init_rc != 0) {
    c.status = Status::kFail;
    c.summary =
        absl::StrCat("cuInit failed: ", cuda.init_rc, " ", cuda.init_error);
    if (cuda.init_rc == 803 ||
        cuda.init_error == "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH") {
      c.fix.push_back(
          "The user-space libcuda and the kernel module differ in "
          "version: reboot, or reinstall one driver version.");
    } else if (cuda.init_rc == 100) {
      c.fix.push_back(
          "No device is visible: check CUDA_VISIBLE_DEVICES and, in a "
          "container, that the GPUs were passed in (--gpus all).");
    } else {
      c.fix.push_back("Check `nvidia-smi` and dmesg for driver errors.");
    }
    return c;
  }
  if (cuda.devices == 0) {
    c.status = Status::kWarn;
    c.summary = "the driver works but shows no GPU";
    c.fix.push_back("Check CUDA_VISIBLE_DEVICES and the container's devices.");
    return c;
  }
  if (nccl_version.empty()) {
    c.status = Status::kWarn;
    c.summary = absl::StrCat(cuda.devices,
                             " GPU(s), but no libnccl.so.2 for muster's NCCL "
                             "backend");
    c.fix.push_back(
        "Install NCCL (Debian/Ubuntu: libnccl2; PyTorch wheels bring their own "
        "in nvidia-nccl-cu12).");
    return c;
  }
  c.status = Status::kPass;
  c.summary = absl::StrCat(cuda.devices, " GPU(s), NCCL ", nccl_version);
  return c;
}

// ---- Command line ----

absl::StatusOr<absl::Duration> ParseTimeout(const std::string& text) {
  absl::StatusOr<absl::Duration> parsed = muster::ParseDuration(text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout '", text,
                     "': write seconds (2, 0.5) or a duration (500ms)"));
  }
  const absl::Duration d = *parsed;
  if (d <= absl::ZeroDuration() || d > absl::Minutes(5)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout '", text, "' must be in (0, 5m]"));
  }
  return d;
}

}  // namespace
}  // namespace doctor

int RunDoctor(const std::vector<std::string>& args,
              const std::map<std::string, std::string>& env) {
  using namespace doctor;  // NOLINT
  Options opt;
#ifdef _WIN32
  opt.os = "windows";
#else
  opt.os = "linux";
#endif
  std::string ports_text;
  std::string timeout_text = "2";
  CLI::App app(
      "Checks why the nodes of a job cannot talk: connectivity to the "
      "rendezvous endpoint, the master and peers (refused / filtered / "
      "rejected / unreachable / DNS), ports in use and by whom, the host name "
      "resolving to loopback (127.0.1.1), Gloo and NCCL interface choice, the "
      "local firewall and the command that opens the ports, CUDA/NCCL, and "
      "stale rank variables. Exit status 1 when a check fails.",
      "muster doctor");
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", opt.rdzv_endpoint,
                 "HOST[:PORT] of the rendezvous server (port 29400)");
  app.add_option("--master-addr,--master_addr", opt.master_addr,
                 "static mode's master address");
  app.add_option("--master-port,--master_port", opt.master_port,
                 "static mode's master port (29500)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--peer", opt.peers,
                 "HOST[:PORT] of another node (repeatable; without a port: "
                 "the --ports, else the master port)")
      ->delimiter(',');
  app.add_option("--ports", ports_text,
                 "the TCP ports the job uses here, A-B or a comma list");
  app.add_flag("--json", opt.json, "print JSON instead of a table");
  std::string rdzv_conf = Get(env, "PET_RDZV_CONF");
  app.add_option("--rdzv-conf,--rdzv_conf", rdzv_conf,
                 "the job's rdzv-conf: tls_ca, tls_cert, tls_key, token_file "
                 "say whether it uses TLS and a token");
  app.add_option("--os", opt.os,
                 "write firewall commands for linux or windows (default: this "
                 "platform)")
      ->check(CLI::IsMember({"linux", "windows"}));
  app.add_option("--timeout", timeout_text,
                 "connect timeout of each probe: seconds or a duration (2)");
  if (std::optional<int> exit = ParseSubcommandArgs(
          app, args, "muster doctor", 2, "\nRun 'muster doctor --help'.")) {
    return *exit;
  }
  auto timeout = ParseTimeout(timeout_text);
  if (!timeout.ok()) {
    std::fprintf(stderr, "muster doctor: %s\n",
                 std::string(timeout.status().message()).c_str());
    return 2;
  }
  opt.timeout = *timeout;
  if (!ports_text.empty()) {
    auto ports = ParsePortRanges(ports_text);
    if (!ports.ok()) {
      std::fprintf(stderr, "muster doctor: %s\n",
                   std::string(ports.status().message()).c_str());
      return 2;
    }
    opt.ports = *ports;
  }
  // Kubeflow's PET_* spellings stand in for absent flags, as for the launcher.
  if (opt.rdzv_endpoint.empty())
    opt.rdzv_endpoint = Get(env, "PET_RDZV_ENDPOINT");
  if (opt.master_addr.empty()) opt.master_addr = Get(env, "PET_MASTER_ADDR");
  if (opt.master_port == 0) {
    int p = 0;
    if (absl::SimpleAtoi(Get(env, "PET_MASTER_PORT"), &p)) opt.master_port = p;
  }
  const int master_port =
      opt.master_port != 0 ? opt.master_port : kDefaultMasterPort;

  // Targets.
  std::vector<Target> targets;
  auto add_target = [&](const std::string& id, const HostPort& hp) {
    if (static_cast<int>(targets.size()) >= kMaxTargets) return;
    Target t;
    t.id = id;
    t.hp = hp;
    t.title = absl::StrCat(id == "endpoint" ? "rdzv endpoint" : id, " ",
                           hp.ToString());
    targets.push_back(t);
  };
  if (!opt.rdzv_endpoint.empty()) {
    auto hp = ParseHostPort(opt.rdzv_endpoint, kDefaultRdzvPort);
    if (!hp.ok()) {
      std::fprintf(stderr, "muster doctor: --rdzv-endpoint: %s\n",
                   std::string(hp.status().message()).c_str());
      return 2;
    }
    add_target("endpoint", *hp);
  }
  if (!opt.master_addr.empty()) {
    add_target("master", HostPort{opt.master_addr, master_port});
    // Static mode: besides --master-port (the workers' store), node rank 0
    // serves muster's rendezvous on the endpoint's port, 29400 unless moved.
    // torchrun needs only the first; this is the port users forget to open.
    if (opt.rdzv_endpoint.empty()) {
      add_target("endpoint", HostPort{opt.master_addr, kDefaultRdzvPort});
      targets.back().title =
          absl::StrCat("static rdzv ", opt.master_addr, ":", kDefaultRdzvPort,
                       " (muster's second port on node rank 0)");
    }
  }
  for (const std::string& peer : opt.peers) {
    auto hp = ParseHostPort(peer, -1);
    if (hp.ok()) {
      add_target("peer", *hp);
      continue;
    }
    auto bare = ParseHostPort(peer, 1);
    if (!bare.ok() || bare->host.empty()) {
      std::fprintf(stderr, "muster doctor: --peer: %s\n",
                   std::string(hp.status().message()).c_str());
      return 2;
    }
    if (opt.ports.empty()) {
      add_target("peer", HostPort{bare->host, master_port});
    } else {
      int n = 0;
      for (const PortRange& r : opt.ports) {
        for (int p = r.first; p <= r.last && n < 8; ++p, ++n) {
          add_target("peer", HostPort{bare->host, p});
        }
      }
    }
  }
  // Probes run concurrently.
  std::vector<ProbeResult> results(targets.size());
  {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < targets.size(); ++i) {
      threads.emplace_back([&, i] {
        results[i] =
            ProbeTcp(targets[i].hp.host, targets[i].hp.port, opt.timeout);
      });
    }
    for (auto& t : threads) t.join();
  }
  // Whether a target is this host, from the address its probe resolved (no
  // second, unbounded DNS lookup).
  const std::vector<InterfaceAddress> ifs = ListInterfaceAddresses();
  const std::string hostname = LocalHostname();
  bool multi_node = false;
  for (size_t i = 0; i < targets.size(); ++i) {
    Target& t = targets[i];
    const std::string& addr = results[i].resolved_address;
    t.local = Lower(t.hp.host) == "localhost" ||
              Lower(t.hp.host) == Lower(hostname) || IsLoopbackText(addr);
    for (const InterfaceAddress& a : ifs) {
      t.local = t.local || (!addr.empty() && a.address == addr);
    }
    multi_node = multi_node || !t.local;
  }

  // Ports this host serves.
  std::vector<PortUse> uses;
  for (const PortRange& r : opt.ports) {
    uses.push_back({r, "--ports", true, false});
  }
  for (const Target& t : targets) {
    if (!t.local) continue;
    if (t.id == "endpoint") {
      uses.push_back(
          {{t.hp.port, t.hp.port}, "rendezvous endpoint", true, true});
    } else if (t.id == "master") {
      uses.push_back({{t.hp.port, t.hp.port}, "master port", true, false});
    }
  }
  if (uses.empty()) {
    // Nothing says which ports this host serves: look at muster's defaults,
    // and only warn.
    uses.push_back({{kDefaultRdzvPort, kDefaultRdzvPort},
                    "musterd's default",
                    false,
                    true});
    if (opt.master_addr.empty()) {
      uses.push_back(
          {{master_port, master_port},
           opt.master_port != 0 ? "--master-port" : "MASTER_PORT's default",
           false,
           false});
    }
  }
  std::vector<PortRange> firewall_ports;
  for (const PortUse& u : uses) firewall_ports.push_back(u.range);
  firewall_ports = Normalize(firewall_ports);

  SocketTable sockets;
  Report report;
  report.hostname = hostname;
  report.os = opt.os;
  for (size_t i = 0; i < targets.size(); ++i) {
    report.checks.push_back(TargetCheck(targets[i], results[i], opt, &sockets));
  }
  report.checks.push_back(PortsCheck(uses, &sockets));
  const HostFacts facts = ResolveHostname(opt.timeout);
  report.checks.push_back(HostnameCheck(facts, ifs, env, multi_node));
  std::vector<std::string> peer_addresses;
  for (const ProbeResult& r : results) {
    if (!r.resolved_address.empty() &&
        std::find(peer_addresses.begin(), peer_addresses.end(),
                  r.resolved_address) == peer_addresses.end()) {
      peer_addresses.push_back(r.resolved_address);
    }
  }
  report.checks.push_back(
      InterfacesCheck(ifs, facts, env, peer_addresses, multi_node));
  report.checks.push_back(FirewallCheck(firewall_ports, opt, env, multi_node));
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i].id != "endpoint") continue;
    absl::StatusOr<rendezvous::ClientSecurity> security =
        ClientSecurityFromFlags(rdzv_conf, "", env);
    const bool client_tls = security.ok() && security->tls();
    const bool token = security.ok() && !security->token.empty();
    report.checks.push_back(doctor::SecurityCheck(
        targets[i].hp.ToString(), targets[i].local,
        results[i].outcome == ProbeOutcome::kOpen
            ? rendezvous::ProbeTls(targets[i].hp.host, targets[i].hp.port,
                                   opt.timeout)
            : rendezvous::TlsProbe::kUnknown,
        client_tls, token));
  }
  report.checks.push_back(EnvironmentCheck(env, opt));
  report.checks.push_back(GpuCheck(env));

  if (opt.json) {
    std::fputs(FormatJson(report).c_str(), stdout);
  } else {
    int width = 100;
    int cols = 0;
    if (absl::SimpleAtoi(Get(env, "COLUMNS"), &cols) && cols >= 60)
      width = cols;
    std::fputs(FormatText(report, width).c_str(), stdout);
  }
  std::fflush(stdout);
  return report.ExitStatus();
}

}  // namespace muster::cli
