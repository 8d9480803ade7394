// The shared-memory transport: allreduce between the ranks of one host
// through a segment they all map, and hierarchical allreduce when a
// communicator spans hosts (shared memory inside each host, Gloo between one
// leader per host). Every other operation, and allreduces the choice below
// leaves to Gloo, go to the communicator's Gloo backend unchanged.
//
// Discovery: each rank publishes its host identity (CommOptions::host_id,
// else MUSTER_HOST_ID, else host name + kernel boot id) in the communicator's
// store namespace; ranks with the same identity form a local group, whose
// lowest rank (the local leader) creates the segment (shm_open under a random
// name, mode 0600), publishes its name and a random token, and removes the
// name once every local rank has mapped it (a crash leaves nothing behind in
// /dev/shm). Every rank then reports whether it could map and check the
// segment; if any rank could not, every rank falls back to Gloo alone (with a
// warning naming the problem), so the ranks never disagree on the path.
//
// Segment layout (each rank's control words on a 128-byte line of their own,
// so that no two ranks write one cache line; data slots 4 KB aligned):
// clang-format off
//
//   0      header: magic, token, ranks, chunk size
//   128    control[0] { arrived, waiters, aborted, pid }   one per local rank
//   128+128 control[1] ...
//   4K     set 0: slot[0] slot[1] ... slot[L-1] result    chunk bytes each
//          set 1: slot[0] slot[1] ... slot[L-1] result
//
// clang-format on
// Synchronization is a barrier on generation counters: a rank stores the
// barrier's number in its `arrived` word and waits until every local peer's
// word reaches it, spinning first, then yielding, then sleeping on a futex
// (the writer wakes only when a waiter announced itself in `waiters`). Each
// step of a collective uses one of the two sets, alternately: a rank writes
// its slot before the step's barrier and its slice of `result` after it;
// slots are read before the next barrier and results before the one after.
// So a set is rewritten only after every rank has passed a barrier that
// follows its reads of it. A large allreduce is pipelined in chunks with one
// barrier per chunk (shm_backend.cc, ReduceChunks).
//
// Failure: a wait never outlives the operation's deadline, and checks about
// every 200 ms that each local peer's process still exists (a peer that
// died is named: "peer rank 3 (pid 4242) was lost"). Abort() (from the peer
// monitor's verdict, a timeout, or this rank's own failure) sets this rank's
// `aborted` word and wakes every waiter of the segment, so local peers stop
// at once too.
#ifndef MUSTER_COMM_SHM_SHM_BACKEND_H_
#define MUSTER_COMM_SHM_SHM_BACKEND_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/src/backend.h"
#include "comm/src/core.h"

namespace muster::comm::internal {

// Puts the shared-memory transport in front of `gloo` (this communicator's
// Gloo backend, connected) when at least one host runs two or more of its
// ranks; returns `gloo` itself otherwise, or when MUSTER_SHM=0, or when some
// rank could not map the segment (a warning says why). Blocks for a few store
// round trips (and, across hosts, the leaders' mesh, which `connect_leaders`
// connects: Gloo, chosen by comm/select/) until `deadline`. Errors: the
// store's (DEADLINE_EXCEEDED, ABORTED, UNAVAILABLE), and those of connecting
// the leaders' mesh.
absl::StatusOr<std::unique_ptr<Backend>> WithSharedMemory(
    const CoreConfig& config, std::unique_ptr<Backend> gloo,
    absl::Time deadline, const BackendConnector& connect_leaders);

// Whether AllReduceAlgorithm::kAuto sends an allreduce of `bytes` bytes
// through shared memory: on one host (`hierarchical` false) or across hosts.
bool SharedMemoryChosen(size_t bytes, bool hierarchical);

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_SHM_SHM_BACKEND_H_
