// The Gloo (TCP, host memory) backend.
#ifndef MUSTER_COMM_GLOO_GLOO_COMMUNICATOR_H_
#define MUSTER_COMM_GLOO_GLOO_COMMUNICATOR_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/src/backend.h"
#include "comm/src/core.h"
#include "muster/comm/communicator.h"

namespace muster::comm::internal {

// Joins the Gloo full mesh of communicator config.key_prefix as config.rank
// of config.world_size, binding config.iface or config.hostname, then (with
// more than one rank, unless MUSTER_GLOO_SYNC_BYTES=0) connects the direct
// mesh through `connect_direct` for the small allreduces. Blocks until every
// peer is connected or `deadline`. Errors as Communicator::Create.
absl::StatusOr<std::unique_ptr<Backend>> ConnectGloo(
    const CoreConfig& config, absl::Time deadline,
    const BackendConnector& connect_direct);

// The allreduce algorithm kAuto picks for `bytes` bytes over `world_size`
// ranks. The thresholds come from measurements on this project's reference
// machine (docs/performance.md, "Collectives").
AllReduceAlgorithm ChooseAllReduceAlgorithm(size_t bytes, int world_size);

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_GLOO_GLOO_COMMUNICATOR_H_
