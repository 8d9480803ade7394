// The interfaces Gloo, NCCL and libmuster_comm pick, against the routes.
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

std::string RouteFrom(const std::map<std::string, std::string>& routes,
                      const std::string& peer) {
  auto it = routes.find(peer);
  return it == routes.end() ? "" : it->second;
}

// "eth0 10.0.0.1/24, ..." for a choice, "none" without one.
std::string Words(const InterfaceChoice& ch) {
  return ch.chosen.empty() ? std::string("none")
                           : internal::DescribeAll(ch.chosen);
}

// The three libraries' choices of interface, which the rules below judge.
struct Choices {
  InterfaceChoice nccl;
  InterfaceChoice gloo;
  InterfaceChoice comm;
};

// Evidence and data: one line per interface.
void ListInterfaces(const std::vector<InterfaceAddress>& ifs, Check* c) {
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
    c->evidence.push_back(
        absl::StrCat(name, " ", state, ": ", absl::StrJoin(addrs, " ")));
    list.push_back({{"name", name},
                    {"up", f.up},
                    {"running", f.running},
                    {"loopback", f.loopback},
                    {"addresses", ja}});
  }
  c->data["interfaces"] = list;
}

// Rules over the choices alone: a variable naming no interface fails; NCCL on
// an interface other nodes cannot reach, or a chosen interface that is down,
// warns.
void ChoiceRules(const Choices& ch, bool multi_node, Check* c,
                 std::vector<std::string>* fails,
                 std::vector<std::string>* warns) {
  const InterfaceChoice& nccl = ch.nccl;
  c->data["nccl"] = internal::ChoiceJson(nccl);
  c->data["gloo"] = internal::ChoiceJson(ch.gloo);
  c->data["muster_comm"] = internal::ChoiceJson(ch.comm);
  c->evidence.push_back(absl::StrCat(
      "NCCL: bootstrap ",
      nccl.chosen.empty() ? "none" : internal::Describe(nccl.chosen.front()),
      nccl.chosen.size() > 1 ? absl::StrCat("; sockets ", Words(nccl)) : "",
      " (", nccl.rule, ")"));
  c->evidence.push_back(
      absl::StrCat("PyTorch Gloo: ", Words(ch.gloo), " (", ch.gloo.rule, ")"));
  c->evidence.push_back(absl::StrCat("libmuster_comm: ", Words(ch.comm), " (",
                                     ch.comm.rule, ")"));
  for (const InterfaceChoice* one : {&ch.nccl, &ch.gloo, &ch.comm}) {
    if (!one->error.empty()) fails->push_back(one->error);
  }
  if (!nccl.chosen.empty() && nccl.error.empty()) {
    const InterfaceAddress& b = nccl.chosen.front();
    if (b.loopback || absl::StartsWith(b.name, "docker") ||
        absl::StartsWith(b.name, "virbr")) {
      std::string w = absl::StrCat("NCCL would use ", internal::Describe(b),
                                   ", which other nodes cannot reach");
      (multi_node ? *warns : c->evidence).push_back(w);
    }
  }
  for (const InterfaceChoice* one : {&ch.gloo, &ch.comm}) {
    for (const InterfaceAddress& a : one->chosen) {
      if (!a.up && !a.loopback && a.name != "?") {
        warns->push_back(absl::StrCat(internal::Describe(a), " is down"));
      }
    }
  }
}

// The rule over the routes: the chosen addresses are the ones this host uses
// to reach its peers, else the peers may not reach them back.
void RouteRules(const std::vector<InterfaceAddress>& ifs,
                const std::vector<std::string>& peer_addresses,
                const std::map<std::string, std::string>& routes,
                const Choices& ch, Check* c, std::vector<std::string>* warns) {
  nlohmann::json route_list = nlohmann::json::array();
  for (const std::string& peer : peer_addresses) {
    if (platform::IsLoopbackAddress(peer)) continue;
    const std::string src = RouteFrom(routes, peer);
    std::string via = "?";
    for (const InterfaceAddress& a : ifs) {
      if (a.address == src) via = a.name;
    }
    route_list.push_back({{"peer", peer}, {"source", src}, {"interface", via}});
    if (src.empty()) {
      warns->push_back(absl::StrCat("no route from this host to ", peer));
      continue;
    }
    c->evidence.push_back(
        absl::StrCat("route to ", peer, ": from ", via, " ", src));
    struct Named {
      const char* name;
      const InterfaceChoice* ch;
      const char* var;
    };
    for (const Named& n : {Named{"NCCL", &ch.nccl, "NCCL_SOCKET_IFNAME"},
                           Named{"Gloo", &ch.gloo, "GLOO_SOCKET_IFNAME"}}) {
      if (n.ch->chosen.empty()) continue;
      const InterfaceAddress& a = n.ch->chosen.front();
      if (a.family != (peer.find(':') != std::string::npos ? IpFamily::kIpv6
                                                           : IpFamily::kIpv4))
        continue;
      if (a.address != src) {
        warns->push_back(absl::StrCat(n.name, " binds ", internal::Describe(a),
                                      " but this host reaches ", peer, " from ",
                                      via, " ", src, ": ", peer,
                                      " must be able to reach ", a.address,
                                      " (else set ", n.var, "=", via, ")"));
      }
    }
  }
  c->data["routes"] = route_list;
}

// The interface to pin both libraries to: the one this host reaches its peers
// from, else the first that is not loopback.
std::string InterfaceToPin(const std::vector<InterfaceAddress>& ifs,
                           const std::vector<std::string>& peer_addresses,
                           const std::map<std::string, std::string>& routes) {
  std::string good = internal::FirstNonLoopbackInterface(ifs);
  for (const std::string& peer : peer_addresses) {
    const std::string src = RouteFrom(routes, peer);
    for (const InterfaceAddress& a : ifs) {
      if (!src.empty() && a.address == src && !a.loopback) good = a.name;
    }
  }
  return good;
}

}  // namespace

Check InterfacesCheck(const std::vector<InterfaceAddress>& ifs,
                      const HostnameFacts& facts,
                      const std::map<std::string, std::string>& env,
                      const std::string& advertised_address,
                      const std::vector<std::string>& peer_addresses,
                      const std::map<std::string, std::string>& routes,
                      bool multi_node, const std::string& os) {
  Check c;
  c.id = "interfaces";
  c.title = "interfaces (Gloo, NCCL)";
  ListInterfaces(ifs, &c);
  const Choices ch{NcclSocketInterfaces(ifs, env),
                   PytorchGlooDevice(ifs, env, facts.hostname, facts.addresses),
                   MusterCommDevice(ifs, env, advertised_address)};
  std::vector<std::string> fails;
  std::vector<std::string> warns;
  ChoiceRules(ch, multi_node, &c, &fails, &warns);
  RouteRules(ifs, peer_addresses, routes, ch, &c, &warns);
  for (const std::string& f : fails) c.evidence.push_back(f);
  for (const std::string& w : warns) c.evidence.push_back(w);
  if (!fails.empty()) {
    c.status = Status::kFail;
    c.summary = fails.front();
    c.fix.push_back(
        "Name an interface that exists here (see the list above), or unset "
        "the variable to let the library choose:");
    std::string good = internal::FirstNonLoopbackInterface(ifs);
    if (!good.empty()) {
      c.commands.push_back(internal::ExportCommand(
          os, {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}, good));
    }
    return c;
  }
  if (!warns.empty()) {
    c.status = Status::kWarn;
    c.summary = warns.front();
    const std::string good = InterfaceToPin(ifs, peer_addresses, routes);
    c.fix.push_back(
        "Pin Gloo and NCCL to the interface the nodes reach each other on, "
        "the same on every node:");
    if (!good.empty()) {
      c.commands.push_back(internal::ExportCommand(
          os, {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}, good));
    }
    return c;
  }
  c.status = Status::kPass;
  c.summary = absl::StrCat("NCCL ",
                           ch.nccl.chosen.empty()
                               ? "none"
                               : internal::Describe(ch.nccl.chosen.front()),
                           "; Gloo ", Words(ch.gloo));
  return c;
}

}  // namespace muster::doctor
