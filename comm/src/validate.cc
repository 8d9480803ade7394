// The checks of every call's arguments (INVALID_ARGUMENT naming the
// problem), before anything reaches a backend.
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "comm/src/core.h"
#include "muster/common/status.h"

namespace muster::comm::internal {
namespace {

// Whether [a, a + n) and [b, b + m) overlap.
bool Overlap(const void* a, size_t n, const void* b, size_t m) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return n > 0 && m > 0 && x < y + m && y < x + n;
}

// The arguments that are not buffers: type, count, reduction, root, peer.
absl::Status CheckScalars(const Op& op, int n, int rank) {
  const size_t size = DataTypeSize(op.dtype);
  if (op.kind != OpKind::kBarrier) {
    if (size == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown DataType ", static_cast<int>(op.dtype)));
    }
    if (op.count > std::numeric_limits<size_t>::max() / size / n) {
      return absl::InvalidArgumentError(
          absl::StrCat("count ", op.count, " is too large"));
    }
  }
  const bool reduces = op.kind == OpKind::kAllReduce ||
                       op.kind == OpKind::kReduce ||
                       op.kind == OpKind::kReduceScatter;
  if (reduces && (static_cast<int>(op.op) < 0 ||
                  static_cast<int>(op.op) > static_cast<int>(ReduceOp::kAvg))) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown ReduceOp ", static_cast<int>(op.op)));
  }
  const bool rooted = op.kind == OpKind::kReduce ||
                      op.kind == OpKind::kBroadcast ||
                      op.kind == OpKind::kGather || op.kind == OpKind::kScatter;
  if (rooted && (op.root < 0 || op.root >= n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("root ", op.root, " is outside [0, ", n, ")"));
  }
  if (op.IsPointToPoint() && (op.root < 0 || op.root >= n || op.root == rank)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "peer ", op.root,
        op.root == rank ? " is this rank"
                        : absl::StrCat(" is outside [0, ", n, ")")));
  }
  return absl::OkStatus();
}

// `p` may be null only where nothing is `needed` from it.
absl::Status Need(const void* p, const char* name, bool needed, size_t count) {
  if (needed && p == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is null but count is ", count));
  }
  return absl::OkStatus();
}

// `in` may be exactly `slot`, else must not overlap [out, out + out_bytes).
absl::Status DisjointOrSlot(const void* in, size_t in_bytes, const void* out,
                            size_t out_bytes, const void* slot) {
  if (in == slot) return absl::OkStatus();
  if (Overlap(in, in_bytes, out, out_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input and output overlap (input must be ",
        slot == nullptr ? "disjoint from the output"
                        : "this rank's slot of the output, or disjoint from "
                          "it",
        ")"));
  }
  return absl::OkStatus();
}

// This rank's block of `buffer` (null when the buffer is).
const void* OwnBlock(const void* buffer, size_t offset) {
  return buffer == nullptr ? nullptr
                           : static_cast<const char*>(buffer) + offset;
}

// Most operations have this rank's own buffer (`mine`, mine_bytes) and a
// second one (`whole`, whole_bytes; only the root's counts on a rooted
// collective), of which `mine` may be exactly this rank's `slot`.
struct Buffers {
  const void* mine;
  const char* mine_name;
  size_t mine_bytes;
  const void* whole;
  const char* whole_name;
  size_t whole_bytes;
  const void* slot;
  bool whole_here;
};

absl::Status CheckBuffers(const Buffers& b, size_t count) {
  MUSTER_RETURN_IF_ERROR(Need(b.mine, b.mine_name, count > 0, count));
  if (!b.whole_here) return absl::OkStatus();
  MUSTER_RETURN_IF_ERROR(Need(b.whole, b.whole_name, count > 0, count));
  return DisjointOrSlot(b.mine, b.mine_bytes, b.whole, b.whole_bytes, b.slot);
}

// AllGatherV: per-rank counts; sets op.count to this rank's.
absl::Status CheckAllGatherV(Op& op, int n, int rank) {
  const size_t size = DataTypeSize(op.dtype);
  if (op.counts.size() != static_cast<size_t>(n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("counts has ", op.counts.size(), " entries, not ", n));
  }
  size_t total = 0;
  size_t offset = 0;
  for (int r = 0; r < n; ++r) {
    if (op.counts[r] > std::numeric_limits<size_t>::max() / size - total) {
      return absl::InvalidArgumentError("counts are too large");
    }
    if (r == rank) offset = total;
    total += op.counts[r];
  }
  op.count = op.counts[rank];
  const size_t mine = op.count * size;
  MUSTER_RETURN_IF_ERROR(Need(op.input, "input", mine > 0, op.count));
  MUSTER_RETURN_IF_ERROR(Need(op.output, "output", total > 0, op.count));
  return DisjointOrSlot(op.input, mine, op.output, total * size,
                        OwnBlock(op.output, offset * size));
}

// The buffers each kind of operation reads and writes: present where
// needed, and not overlapping where the operation forbids it.
absl::Status CheckBuffersOf(Op& op, int n, int rank) {
  const size_t bytes = op.count * DataTypeSize(op.dtype);
  const size_t all_bytes = bytes * n;
  const bool is_root = op.root == rank;
  const bool any = op.count > 0;
  // The output of the root only.
  const char* const root_output = "output on the root";
  switch (op.kind) {
    case OpKind::kAllReduce:
      return CheckBuffers({op.input, "input", bytes, op.output, "output", bytes,
                           op.output, true},
                          op.count);
    case OpKind::kReduce:
      return CheckBuffers({op.input, "input", bytes, op.output, root_output,
                           bytes, op.output, is_root},
                          op.count);
    case OpKind::kBroadcast:
      return Need(op.output, "data", any, op.count);
    case OpKind::kAllGather:
    case OpKind::kGather:
      return CheckBuffers({op.input, "input", bytes, op.output,
                           op.kind == OpKind::kGather ? root_output : "output",
                           all_bytes, OwnBlock(op.output, rank * bytes),
                           op.kind == OpKind::kAllGather || is_root},
                          op.count);
    case OpKind::kAllGatherV:
      return CheckAllGatherV(op, n, rank);
    case OpKind::kScatter:
    case OpKind::kReduceScatter:
      return CheckBuffers(
          {op.output, "output", bytes, op.input,
           op.kind == OpKind::kScatter ? "input on the root" : "input",
           all_bytes, OwnBlock(op.input, rank * bytes),
           op.kind == OpKind::kReduceScatter || is_root},
          op.count);
    case OpKind::kAllToAll:
      return CheckBuffers({op.input, "input", all_bytes, op.output, "output",
                           all_bytes, nullptr, true},
                          op.count);
    case OpKind::kBarrier:
      return absl::OkStatus();
    case OpKind::kSend:
      return Need(op.input, "data", any, op.count);
    case OpKind::kRecv:
      return Need(op.output, "data", any, op.count);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CommCore::Validate(Op& op) const {
  absl::Status status = ValidateArguments(op);
  if (status.ok()) return status;
  // The prefix is built only on failure: validation runs on every call.
  return absl::InvalidArgumentError(
      absl::StrCat(who_, ": ", OpName(op.kind), ": ", status.message()));
}

absl::Status CommCore::ValidateArguments(Op& op) const {
  MUSTER_RETURN_IF_ERROR(CheckScalars(op, config_.world_size, config_.rank));
  MUSTER_RETURN_IF_ERROR(CheckBuffersOf(op, config_.world_size, config_.rank));
  // The call's timeout, bounded by the communicator's (which bounds the
  // backend's own waits).
  const absl::Duration limit = config_.options.timeout;
  op.timeout =
      op.timeout > absl::ZeroDuration() ? std::min(op.timeout, limit) : limit;
  return absl::OkStatus();
}

}  // namespace muster::comm::internal
