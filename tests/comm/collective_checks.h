// Every collective x dtype x op of libmuster_comm against a reference computed
// here, independently of the library's kernels. Shared by the thread tests
// (comm_collectives_test) and the worker that runs as processes under muster
// (comm_worker). Each check returns the first mismatch as an error naming the
// collective, dtype, op, rank and element.
#ifndef MUSTER_TESTS_COMM_COLLECTIVE_CHECKS_H_
#define MUSTER_TESTS_COMM_COLLECTIVE_CHECKS_H_

#include "absl/status/status.h"
#include "muster/comm/communicator.h"

namespace muster::comm::testing {

// AllReduce: every dtype x op, in and out of place, small, ragged and larger
// than one segment.
absl::Status CheckAllReduce(Communicator& comm);
// Reduce to every root: every dtype with sum and avg, every op on float32.
absl::Status CheckReduce(Communicator& comm);
// Broadcast from every root, every dtype.
absl::Status CheckBroadcast(Communicator& comm);
// AllGather (in and out of place), AllGatherV (uneven counts, one zero),
// Gather and Scatter to/from every root (in place at the root too).
absl::Status CheckGathers(Communicator& comm);
// ReduceScatter: every dtype x op, in and out of place; AllToAll every dtype.
absl::Status CheckReduceScatterAndAllToAll(Communicator& comm);
// Send/Recv around the ring (blocking and asynchronous, two tags), and
// asynchronous collectives queued three deep.
absl::Status CheckPointToPointAndAsync(Communicator& comm);

// All of the above, then a Barrier.
absl::Status CheckEverything(Communicator& comm);

}  // namespace muster::comm::testing

#endif  // MUSTER_TESTS_COMM_COLLECTIVE_CHECKS_H_
