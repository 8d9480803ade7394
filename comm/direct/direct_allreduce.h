// DirectAllreduce: small allreduces on a TCP mesh that libmuster_comm owns.
//
// Why not Gloo for small messages: Gloo's fast path for them is its sync
// mode, where the waiting thread blocks in read(2) on the pair's socket while
// holding the pair's lock. Nothing in Gloo's API can wake that thread: only
// data, EOF, or a shutdown(2) of a descriptor Gloo does not hand out. Finding
// those descriptors from outside (scanning /proc/self/fd) was racy, and a
// missed abort left a survivor waiting for the collective's timeout. Here the
// sockets are ours: an abort signals a wake-up (Wakeup, in
// muster/platform/socket.h) that the waiting poll watches, then shuts every
// connection down so every peer's call fails too. No scan, no window between
// the verdict and the wake-up, and the per-call deadline is exact.
//
// The algorithm: every rank sends its whole message to every peer at once
// (non-blocking, so no pair of ranks can block each other), then reduces the
// N messages in rank order. One network step instead of the ring's 2(N-1),
// and every rank adds the same numbers in the same order, so floating-point
// results are bit-identical across ranks. It costs (N-1) x the message per
// rank, which is why the backend uses it for small messages and few ranks
// only (gloo_communicator.cc: kDirectBudgetBytes).
//
// Thread-compatible: one Run at a time (the backend serialises collectives);
// Abort may be called from any thread at any time.
#ifndef MUSTER_COMM_DIRECT_DIRECT_ALLREDUCE_H_
#define MUSTER_COMM_DIRECT_DIRECT_ALLREDUCE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/src/tcp_mesh.h"
#include "muster/comm/types.h"

namespace muster::comm::internal {

class DirectAllreduce {
 public:
  // Connects the mesh (options.what names it in errors). Blocks until every
  // peer is connected or options.deadline; errors as ConnectTcpMesh.
  static absl::StatusOr<std::unique_ptr<DirectAllreduce>> Connect(
      TcpMeshOptions options);

  ~DirectAllreduce() = default;  // Closes the connections.

  DirectAllreduce(const DirectAllreduce&) = delete;
  DirectAllreduce& operator=(const DirectAllreduce&) = delete;

  // Reduces `count` elements of `dtype` at `data` in place with `op` across
  // every rank (kAvg sums: the caller divides). Blocks until done or:
  // ABORTED (Abort was called, before or during the call), UNAVAILABLE naming
  // the peer whose connection ended, DEADLINE_EXCEEDED at `deadline`,
  // INTERNAL when a peer sent a message out of step (a different size: the
  // ranks called collectives in different orders). After any error the mesh
  // is unusable and every later call fails with ABORTED.
  absl::Status Run(void* data, size_t count, DataType dtype, ReduceOp op,
                   absl::Time deadline);

  // Every rank's `bytes` at `data`, in rank order, into `out` (world size x
  // `bytes`; must not overlap `data`). Same protocol and errors as Run: the
  // reduction is the only difference (the mesh-only backend's AllGather,
  // Broadcast and Barrier, direct_backend.h).
  absl::Status AllGather(const void* data, size_t bytes, void* out,
                         absl::Time deadline);

  // Fails the call in flight at once, and every later one, with ABORTED;
  // shuts every connection down, so the peers' calls fail as well. Never
  // blocks; idempotent.
  void Abort();

 private:
  DirectAllreduce(int rank, std::string who, std::vector<TcpMeshPeer> peers,
                  std::unique_ptr<Wakeup> wake);

  absl::Status Exchange(const void* data, size_t bytes, absl::Time deadline);
  // Exchange into inbox_ (every rank's message at rank x bytes, this rank's
  // copied in too); aborts the mesh on failure.
  absl::Status ExchangeAll(const void* data, size_t bytes, absl::Time deadline);

  const int rank_;
  const std::string who_;  // "rank 1/4"
  std::vector<TcpMeshPeer> peers_;
  const std::unique_ptr<Wakeup> wake_;  // Abort wakes the poll in Run.
  std::atomic<bool> aborted_{false};
  uint64_t seq_ = 0;
  std::vector<char> inbox_;      // Each peer's message, at rank x bytes.
  PollSet poll_;                 // Reused by every Exchange.
  std::vector<int> poll_ranks_;  // The peer of each poll entry (-1: wake_).
};

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_DIRECT_DIRECT_ALLREDUCE_H_
