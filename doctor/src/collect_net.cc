#include "doctor/src/collect_net.h"

#include <string>
#include <thread>
#include <vector>

namespace muster::doctor::internal {
namespace {

std::vector<ProbeResult> Probe(const Plan& plan, platform::Net& net) {
  std::vector<ProbeResult> results(plan.targets.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < plan.targets.size(); ++i) {
    threads.emplace_back([&, i] {
      const HostPort& hp = plan.targets[i].hp;
      results[i] = ProbeTcp(net, hp.host, hp.port, plan.options.timeout);
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

}  // namespace

void CollectNetworkFacts(const Plan& plan, platform::Net& net, Facts* f) {
  f->probes = Probe(plan, net);
  f->interfaces = net.Interfaces();
  f->advertised_address = AdvertisedAddress(f->interfaces);
  for (const ProbeResult& r : f->probes) {
    const std::string& a = r.resolved_address;
    if (a.empty() || platform::IsLoopbackAddress(a)) continue;
    f->routes[a] = net.RouteSource(a);
  }
  f->sockets = net.TcpSockets(plan.local_ports);
  for (int port : plan.local_ports) {
    // As a server would bind it: all addresses, SO_REUSEADDR.
    const int err = net.TryBind("0.0.0.0", port, /*reuse_address=*/true);
    if (err != 0) f->bind_errors[port] = err;
  }
  HostnameFacts& h = f->host;
  h.hostname = net.Hostname();
  const platform::Resolution r = net.Resolve(h.hostname, plan.options.timeout);
  h.resolved = r.ok;
  h.resolve_error = r.message;
  for (const std::string& a : r.addresses) {
    h.addresses.push_back({a, net.TryBind(a, 0, /*reuse_address=*/false) == 0,
                           platform::IsLoopbackAddress(a)});
  }
}

}  // namespace muster::doctor::internal
