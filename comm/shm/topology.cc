#include "comm/shm/topology.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "comm/shm/platform.h"
#include "muster/platform/env.h"

namespace muster::comm::internal {

std::string HostIdOf(const CoreConfig& config) {
  if (!config.options.host_id.empty()) return config.options.host_id;
  if (std::optional<std::string> env = platform::GetEnv("MUSTER_HOST_ID");
      env.has_value() && !env->empty()) {
    return *env;
  }
  return shm::HostIdentity();
}

Topology MakeTopology(const std::vector<std::string>& hosts, int rank) {
  Topology t;
  std::map<std::string, int> index;
  std::vector<int> count;
  for (const std::string& h : hosts) {
    auto [it, added] = index.emplace(h, static_cast<int>(index.size()));
    if (added) count.push_back(0);
    ++count[it->second];
  }
  t.num_hosts = static_cast<int>(index.size());
  t.host_index = index[hosts[rank]];
  for (int r = 0; r < static_cast<int>(hosts.size()); ++r) {
    if (hosts[r] == hosts[rank]) {
      if (r == rank) t.local_rank = static_cast<int>(t.local.size());
      t.local.push_back(r);
    }
  }
  for (int c : count) t.any_shared_host |= c > 1;
  return t;
}

}  // namespace muster::comm::internal
