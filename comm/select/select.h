// Backend selection: which backends a communicator runs on, and building
// them. The layer above the core and the backends: CommCore (comm/src/) knows
// only the Backend interface and gets its backends through ConnectBackends;
// no backend (comm/gloo/, comm/direct/, comm/shm/, comm/nccl/) names another,
// and where one builds on another (shared memory on the leaders' Gloo mesh,
// Gloo on the direct mesh for small allreduces) the connector comes from here.
#ifndef MUSTER_COMM_SELECT_SELECT_H_
#define MUSTER_COMM_SELECT_SELECT_H_

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "comm/src/core.h"

namespace muster::comm::internal {

// A BackendsConnector (core.h) for config.options.backend:
//   kGloo: the host backend: Gloo (with the direct mesh for small
//     allreduces), or the direct mesh alone when the ranks cannot share a
//     Gloo mesh (different Gloo transports, or MUSTER_COMM_MESH=direct), with
//     the shared-memory transport in front where ranks share a host.
//   kNccl: NCCL (shrunk from backends.previous_device under the control
//     channel when only survivors remain).
//   kAuto: the host backend, and NCCL too when every rank can run it (rank 0
//     decides through the store); an NCCL that cannot start is a warning.
// Blocks until connected or `deadline`. Errors: the backends' and the
// store's, annotated with this rank.
absl::Status ConnectBackends(const CoreConfig& config, absl::Time deadline,
                             Backends& backends);

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_SELECT_SELECT_H_
