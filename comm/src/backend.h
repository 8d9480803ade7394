// The seam between the backend-independent communicator (comm/src/core.h) and
// a backend (Gloo in comm/gloo/, NCCL in comm/nccl/): one descriptor per
// operation, validated before it reaches the backend.
#ifndef MUSTER_COMM_SRC_BACKEND_H_
#define MUSTER_COMM_SRC_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "muster/comm/types.h"

namespace muster::comm::internal {

// Values are those of the C API's muster_op_kind (never renumbered).
enum class OpKind : int {
  kAllReduce = 0,
  kReduce = 1,
  kBroadcast = 2,
  kAllGather = 3,
  kAllGatherV = 4,
  kGather = 5,
  kScatter = 6,
  kReduceScatter = 7,
  kAllToAll = 8,
  kBarrier = 9,
  kSend = 10,
  kRecv = 11,
};

// "AllReduce", "Send", ...; "unknown" outside the enum.
absl::string_view OpName(OpKind kind);

// One operation, as the public API describes it (communicator.h): counts in
// elements, `root` is the root or (Send/Recv) the peer.
struct Op {
  OpKind kind = OpKind::kBarrier;
  const void* input = nullptr;
  void* output = nullptr;
  size_t count = 0;
  std::vector<size_t> counts;  // AllGatherV: world_size entries.
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  uint32_t tag = 0;  // Send/Recv: the caller's tag.
  absl::Duration timeout;

  bool IsPointToPoint() const {
    return kind == OpKind::kSend || kind == OpKind::kRecv;
  }
};

// "AllReduce(1000 x float32, sum)", "Broadcast(17 x int8, root 2)", ...
std::string DescribeOp(const Op& op);

// An error that only echoes another rank's failure (a local peer aborted the
// shared-memory collective it was in): the rank that aborted knows the root
// cause and tells every peer, so the communicator waits longer for that
// verdict before it names the echoing peer instead.
absl::Status EchoedFailure(absl::string_view message);
bool IsEchoedFailure(const absl::Status& status);

// A posted Send or Recv.
class PendingP2P {
 public:
  virtual ~PendingP2P() = default;
  // Blocks until the transfer completes or `deadline` passes. Called once.
  virtual absl::Status Wait(absl::Time deadline) = 0;
};

// A backend of one communicator. Run is called for one operation at a time
// (the core serializes collectives); Post may run concurrently with Run;
// Abort and the accessors may be called from any thread at any time before
// destruction.
class Backend {
 public:
  virtual ~Backend() = default;

  // "gloo", "nccl".
  virtual absl::string_view name() const = 0;

  // Runs a collective (not Send/Recv) whose arguments are validated. Blocks
  // until done, or until `deadline` (then DEADLINE_EXCEEDED), or until Abort.
  virtual absl::Status Run(const Op& op, absl::Time deadline) = 0;

  // Posts a Send or Recv and returns at once; the transfer completes in the
  // background and its Wait reports it.
  virtual absl::StatusOr<std::unique_ptr<PendingP2P>> Post(const Op& op) = 0;

  // Makes the operation in flight, if any, and every later one fail promptly.
  // `why` is for logs; the core reports its own reason. Idempotent.
  virtual void Abort(const absl::Status& why) = 0;

  // Closes every connection. Called once, with no operation in flight.
  virtual void Close() = 0;

  // NCCL (Recover): a backend over this one's ranks without `excluded` (old
  // ranks, ascending), the others keeping their order, this rank becoming
  // `rank` of `world_size`. Called on an aborted backend, once; this one is
  // left closed. UNIMPLEMENTED where the backend (or the NCCL library, before
  // 2.27) cannot: the caller then connects a new one.
  virtual absl::StatusOr<std::unique_ptr<Backend>> Shrink(
      const std::vector<int>& excluded, int rank, int world_size,
      absl::Time deadline) {
    (void)excluded;
    (void)rank;
    (void)world_size;
    (void)deadline;
    return absl::UnimplementedError("this backend cannot shrink");
  }
};

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_SRC_BACKEND_H_
