// Which ranks of a communicator share a host, for the shared-memory
// transport (shm_backend.h): a host's identity, and this rank's place among
// the hosts.
#ifndef MUSTER_COMM_SHM_TOPOLOGY_H_
#define MUSTER_COMM_SHM_TOPOLOGY_H_

#include <string>
#include <vector>

#include "comm/src/core.h"

namespace muster::comm::internal {

// This rank's host: CommOptions::host_id, else MUSTER_HOST_ID, else the host
// name and the kernel's boot id (shm::HostIdentity).
std::string HostIdOf(const CoreConfig& config);

// Who this rank is among the communicator's hosts.
struct Topology {
  int num_hosts = 0;
  int host_index = 0;            // Hosts numbered by their lowest rank.
  std::vector<int> local;        // Global ranks on this host, ascending.
  int local_rank = 0;            // Index of this rank in `local`.
  bool any_shared_host = false;  // Some host has two or more ranks.
};

// The topology of ranks whose hosts are `hosts` (indexed by rank), seen from
// `rank`.
Topology MakeTopology(const std::vector<std::string>& hosts, int rank);

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_SHM_TOPOLOGY_H_
