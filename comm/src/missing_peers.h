// Naming the ranks that never joined: a join that timed out says who is
// missing instead of only that it waited. Shared by every place ranks meet
// through the store (the Gloo mesh, the mesh-kind agreement), so it lives in
// the core, which every backend may include.
#ifndef MUSTER_COMM_SRC_MISSING_PEERS_H_
#define MUSTER_COMM_SRC_MISSING_PEERS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "muster/store/store.h"

namespace muster::comm::internal {

// After a join that timed out (`status`): names the ranks that never
// published `key_prefix` + their rank, as DEADLINE_EXCEEDED with the hint;
// `status` when that says nothing. Reads the store without waiting.
absl::Status DescribeMissingPeers(const absl::Status& status,
                                  store::Store& store,
                                  const std::string& key_prefix, int rank,
                                  int world_size, absl::Duration timeout);

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_SRC_MISSING_PEERS_H_
