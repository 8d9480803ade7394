// The host name resolving to loopback (the 127.0.1.1 trap) or not at all.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "doctor/src/util.h"
#include "muster/doctor/checks.h"

namespace muster::doctor {
namespace {

using internal::ChoiceJson;
using internal::Describe;
using internal::DescribeAll;
using internal::ExportCommand;
using internal::FirstNonLoopbackInterface;
using internal::Get;
using internal::Lower;

struct HostsLine {
  int number = 0;
  std::string text;
  std::string address;
};

// The lines of the hosts file (`text`) that name `hostname` or its short form.
std::vector<HostsLine> HostsEntriesFor(absl::string_view text,
                                       const std::string& hostname) {
  std::vector<HostsLine> out;
  int n = 0;
  const std::string host = Lower(hostname);
  const std::string short_host = host.substr(0, host.find('.'));
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++n;
    absl::string_view l = line;
    l = l.substr(0, l.find('#'));
    std::vector<std::string> tok = absl::StrSplit(
        l, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());  // CRLF on Windows
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

}  // namespace

Check HostnameCheck(const HostnameFacts& facts,
                    const std::vector<InterfaceAddress>& ifs,
                    const std::map<std::string, std::string>& env,
                    bool multi_node, const std::string& os) {
  Check c;
  c.id = "hostname";
  c.title = absl::StrCat("host name ", facts.hostname);
  const std::vector<HostsLine> hosts =
      HostsEntriesFor(facts.hosts_file, facts.hostname);
  for (const HostsLine& h : hosts) {
    c.evidence.push_back(
        absl::StrCat(facts.hosts_path, ":", h.number, ": ", h.text));
  }
  std::vector<std::string> addr_words;
  nlohmann::json resolved = nlohmann::json::array();
  for (const ResolvedAddress& r : facts.addresses) {
    addr_words.push_back(
        absl::StrCat(r.address, r.loopback ? " (loopback)" : "",
                     r.bindable ? "" : " (not an address of this host)"));
    resolved.push_back({{"address", r.address},
                        {"loopback", r.loopback},
                        {"bindable", r.bindable}});
  }
  c.data["hostname"] = facts.hostname;
  c.data["resolved"] = resolved;
  if (!facts.resolved) {
    c.evidence.push_back(absl::StrCat("getaddrinfo(", facts.hostname,
                                      "): ", facts.resolve_error));
  } else {
    c.evidence.push_back(absl::StrCat("getaddrinfo(", facts.hostname,
                                      ") = ", absl::StrJoin(addr_words, ", ")));
  }
  const InterfaceChoice gloo =
      PytorchGlooDevice(ifs, env, facts.hostname, facts.addresses);
  const InterfaceChoice nccl = NcclSocketInterfaces(ifs, env);
  c.data["gloo"] = ChoiceJson(gloo);
  c.data["nccl"] = ChoiceJson(nccl);
  const std::string gloo_addr =
      gloo.chosen.empty() ? "" : gloo.chosen.front().address;
  const bool gloo_loopback = platform::IsLoopbackAddress(gloo_addr);
  const std::string nccl_words =
      nccl.chosen.empty() ? "no interface" : Describe(nccl.chosen.front());
  const std::string good_if =
      !nccl.chosen.empty() && !nccl.chosen.front().loopback
          ? nccl.chosen.front().name
          : FirstNonLoopbackInterface(ifs);
  std::string good_addr;
  for (const InterfaceAddress& a : ifs) {
    if (a.name == good_if && a.family == IpFamily::kIpv4) {
      good_addr = a.address;
      break;
    }
  }
  const bool gloo_env = !Get(env, "GLOO_SOCKET_IFNAME").empty();
  bool trap = false;
  for (const ResolvedAddress& r : facts.addresses) {
    if (r.bindable) {
      trap = r.loopback;
      break;
    }
  }
  c.data["loopback_trap"] = trap;
  std::string loop_addr;
  for (const ResolvedAddress& r : facts.addresses) {
    if (r.loopback) {
      loop_addr = r.address;
      break;
    }
  }
  if (!facts.resolved || facts.addresses.empty() || trap) {
    if (!facts.resolved || facts.addresses.empty()) {
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
            "Map the host name to the address peers reach: in ",
            facts.hosts_path, " change line ", hosts.front().number, " '",
            hosts.front().text, "' to '", good_addr, " ", facts.hostname,
            "' (keep 'localhost' on 127.0.0.1)."));
      } else {
        c.fix.push_back(absl::StrCat("Map the host name to ", good_addr,
                                     " in DNS or ", facts.hosts_path, "."));
      }
      c.fix.push_back(
          absl::StrCat("Or pin the interface for every rank on every node:"));
      c.commands.push_back(ExportCommand(
          os, {"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"}, good_if));
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

}  // namespace muster::doctor
