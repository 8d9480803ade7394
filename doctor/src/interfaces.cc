// Interface choice as NCCL, PyTorch's Gloo and libmuster_comm make it.
#include "muster/doctor/interfaces.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "doctor/src/util.h"
#include "muster/common/net.h"

namespace muster::doctor {
namespace {

using internal::Get;

// NCCL's findInterfaces(prefixList, ...).
std::vector<InterfaceAddress> NcclFind(
    const std::vector<InterfaceAddress>& addresses, absl::string_view list,
    std::optional<IpFamily> family, int max) {
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
    if (family.has_value() && a.family != *family) continue;
    if (a.family == IpFamily::kIpv6 && a.address == "::1") continue;
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
  const std::optional<platform::IpBytes> la =
      platform::ParseIpAddress(a.address);
  const std::optional<platform::IpBytes> ra = platform::ParseIpAddress(remote);
  if (!la.has_value() || !ra.has_value() || la->family != ra->family ||
      la->family != a.family) {
    return false;
  }
  int bits = a.prefix_len;
  for (int i = 0; i < la->size() && bits > 0; ++i, bits -= 8) {
    unsigned char mask =
        bits >= 8 ? 0xff : static_cast<unsigned char>(0xff << (8 - bits));
    if ((la->bytes[i] & mask) != (ra->bytes[i] & mask)) return false;
  }
  return true;
}

}  // namespace

InterfaceChoice NcclSocketInterfaces(
    const std::vector<InterfaceAddress>& addresses,
    const std::map<std::string, std::string>& env, int max_interfaces) {
  InterfaceChoice choice;
  std::optional<IpFamily> family;
  const std::string fam = Get(env, "NCCL_SOCKET_FAMILY");
  std::string fam_note;
  if (fam == "AF_INET") {
    family = IpFamily::kIpv4;
    fam_note = ", IPv4 only (NCCL_SOCKET_FAMILY=AF_INET)";
  } else if (fam == "AF_INET6") {
    family = IpFamily::kIpv6;
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
  a.family = address.find(':') != std::string::npos ? IpFamily::kIpv6
                                                    : IpFamily::kIpv4;
  a.loopback = platform::IsLoopbackAddress(address);
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

std::string AdvertisedAddress(const std::vector<InterfaceAddress>& addresses) {
  for (const InterfaceAddress& i : addresses) {
    if (i.family != IpFamily::kIpv4 || !i.up || i.loopback) continue;
    if (platform::IsLoopbackAddress(i.address)) continue;
    return i.address;
  }
  return "127.0.0.1";
}

}  // namespace muster::doctor
