// What to probe (MakePlan), which ports this host serves (PortUses), and the
// run of every check over the facts (Diagnose).
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "doctor/src/util.h"
#include "muster/doctor/checks.h"

namespace muster::doctor {

using internal::Lower;

absl::StatusOr<Plan> MakePlan(const Options& opt) {
  Plan plan;
  plan.options = opt;
  plan.master_port =
      opt.master_port != 0 ? opt.master_port : kDefaultMasterPort;
  std::vector<Target>& targets = plan.targets;
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
    // musterd replicas (H1:P1,H2:P2) are each a target.
    auto list = ParseHostPortList(opt.rdzv_endpoint, kDefaultRdzvPort);
    if (!list.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--rdzv-endpoint: ", list.status().message()));
    }
    for (const HostPort& hp : *list) add_target("endpoint", hp);
  }
  if (!opt.master_addr.empty()) {
    add_target("master", HostPort{opt.master_addr, plan.master_port});
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
      return absl::InvalidArgumentError(
          absl::StrCat("--peer: ", hp.status().message()));
    }
    if (opt.ports.empty()) {
      add_target("peer", HostPort{bare->host, plan.master_port});
    } else {
      int n = 0;
      for (const PortRange& r : opt.ports) {
        for (int p = r.first; p <= r.last && n < 8; ++p, ++n) {
          add_target("peer", HostPort{bare->host, p});
        }
      }
    }
  }
  // The ports PortUses may name, whichever targets turn out local.
  std::set<int> ports = {kDefaultRdzvPort, plan.master_port};
  for (const Target& t : targets) ports.insert(t.hp.port);
  int n = 0;
  for (const PortRange& r : opt.ports) {
    for (int p = r.first; p <= r.last && n < kMaxPortsChecked; ++p, ++n) {
      ports.insert(p);
    }
  }
  plan.local_ports.assign(ports.begin(), ports.end());
  return plan;
}

std::vector<bool> LocalTargets(const Plan& plan, const Facts& facts) {
  std::vector<bool> local(plan.targets.size(), false);
  for (size_t i = 0; i < plan.targets.size(); ++i) {
    const Target& t = plan.targets[i];
    const std::string addr =
        i < facts.probes.size() ? facts.probes[i].resolved_address : "";
    bool is_local = Lower(t.hp.host) == "localhost" ||
                    Lower(t.hp.host) == Lower(facts.host.hostname) ||
                    platform::IsLoopbackAddress(addr);
    for (const InterfaceAddress& a : facts.interfaces) {
      is_local = is_local || (!addr.empty() && a.address == addr);
    }
    local[i] = is_local;
  }
  return local;
}

std::vector<PortUse> PortUses(const Plan& plan,
                              const std::vector<bool>& local) {
  const Options& opt = plan.options;
  std::vector<PortUse> uses;
  for (const PortRange& r : opt.ports) {
    uses.push_back({r, "--ports", true, false});
  }
  for (size_t i = 0; i < plan.targets.size(); ++i) {
    const Target& t = plan.targets[i];
    if (!local[i]) continue;
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
          {{plan.master_port, plan.master_port},
           opt.master_port != 0 ? "--master-port" : "MASTER_PORT's default",
           false,
           false});
    }
  }
  return uses;
}

Report Diagnose(const Plan& plan, const Facts& facts) {
  const Options& opt = plan.options;
  const std::vector<bool> local = LocalTargets(plan, facts);
  const bool multi_node =
      std::find(local.begin(), local.end(), false) != local.end();
  const std::vector<PortUse> uses = PortUses(plan, local);
  std::vector<PortRange> firewall_ports;
  for (const PortUse& u : uses) firewall_ports.push_back(u.range);
  firewall_ports = NormalizePortRanges(firewall_ports);

  Report report;
  report.hostname = facts.host.hostname;
  report.os = opt.os;
  const ProbeResult no_probe;
  auto probe = [&](size_t i) -> const ProbeResult& {
    return i < facts.probes.size() ? facts.probes[i] : no_probe;
  };
  for (size_t i = 0; i < plan.targets.size(); ++i) {
    report.checks.push_back(TargetCheck(plan.targets[i], local[i], probe(i),
                                        opt.os, facts.sockets));
  }
  report.checks.push_back(
      PortsCheck(uses, facts.bind_errors, facts.sockets, opt.os));
  report.checks.push_back(HostnameCheck(facts.host, facts.interfaces, facts.env,
                                        multi_node, opt.os));
  std::vector<std::string> peer_addresses;
  for (const ProbeResult& r : facts.probes) {
    if (!r.resolved_address.empty() &&
        std::find(peer_addresses.begin(), peer_addresses.end(),
                  r.resolved_address) == peer_addresses.end()) {
      peer_addresses.push_back(r.resolved_address);
    }
  }
  report.checks.push_back(InterfacesCheck(
      facts.interfaces, facts.host, facts.env, facts.advertised_address,
      peer_addresses, facts.routes, multi_node, opt.os));
  report.checks.push_back(
      FirewallCheck(firewall_ports, facts.firewall, opt.os, multi_node));
  for (size_t i = 0; i < plan.targets.size(); ++i) {
    if (plan.targets[i].id != "endpoint") continue;
    const TlsAnswer tls = i < facts.security.endpoint_tls.size()
                              ? facts.security.endpoint_tls[i]
                              : TlsAnswer::kUnknown;
    report.checks.push_back(
        SecurityCheck(plan.targets[i].hp.ToString(), local[i], tls,
                      facts.security.client_tls, facts.security.token));
  }
  report.checks.push_back(
      EnvironmentCheck(facts.env, opt.master_addr, opt.master_port, opt.os));
  report.checks.push_back(GpuCheck(facts.gpu, facts.env));
  return report;
}

}  // namespace muster::doctor
