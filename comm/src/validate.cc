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

}  // namespace

absl::Status CommCore::Validate(Op& op) const {
  absl::Status status = ValidateArguments(op);
  if (status.ok()) return status;
  // The prefix is built only on failure: validation runs on every call.
  return absl::InvalidArgumentError(
      absl::StrCat(who_, ": ", OpName(op.kind), ": ", status.message()));
}

absl::Status CommCore::ValidateArguments(Op& op) const {
  const int n = config_.world_size;
  constexpr absl::string_view what = "";
  const size_t size = DataTypeSize(op.dtype);
  if (op.kind != OpKind::kBarrier) {
    if (size == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, "unknown DataType ", static_cast<int>(op.dtype)));
    }
    if (op.count > std::numeric_limits<size_t>::max() / size / n) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, "count ", op.count, " is too large"));
    }
  }
  const bool reduces = op.kind == OpKind::kAllReduce ||
                       op.kind == OpKind::kReduce ||
                       op.kind == OpKind::kReduceScatter;
  if (reduces && (static_cast<int>(op.op) < 0 ||
                  static_cast<int>(op.op) > static_cast<int>(ReduceOp::kAvg))) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "unknown ReduceOp ", static_cast<int>(op.op)));
  }
  const bool rooted = op.kind == OpKind::kReduce ||
                      op.kind == OpKind::kBroadcast ||
                      op.kind == OpKind::kGather || op.kind == OpKind::kScatter;
  if (rooted && (op.root < 0 || op.root >= n)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "root ", op.root, " is outside [0, ", n, ")"));
  }
  if (op.IsPointToPoint() &&
      (op.root < 0 || op.root >= n || op.root == config_.rank)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, "peer ", op.root,
        op.root == config_.rank ? " is this rank"
                                : absl::StrCat(" is outside [0, ", n, ")")));
  }
  const size_t bytes = op.count * size;
  const size_t all_bytes = bytes * n;
  const bool is_root = op.root == config_.rank;
  auto need = [&](const void* p, const char* name,
                  bool needed) -> absl::Status {
    if (needed && p == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, name, " is null but count is ", op.count));
    }
    return absl::OkStatus();
  };
  // `in` may be exactly `slot`, else must not overlap [out, out + out_bytes).
  auto disjoint_or_slot = [&](const void* in, size_t in_bytes, const void* out,
                              size_t out_bytes,
                              const void* slot) -> absl::Status {
    if (in == slot) return absl::OkStatus();
    if (Overlap(in, in_bytes, out, out_bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, "input and output overlap (input must be ",
          slot == nullptr ? "disjoint from the output"
                          : "this rank's slot of the output, or disjoint from "
                            "it",
          ")"));
    }
    return absl::OkStatus();
  };
  // This rank's block of `buffer` (null when the buffer is).
  auto own_block = [&](const void* buffer, size_t offset) -> const void* {
    return buffer == nullptr ? nullptr
                             : static_cast<const char*>(buffer) + offset;
  };
  const bool any = op.count > 0;
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
  auto check = [&](const Buffers& b) -> absl::Status {
    MUSTER_RETURN_IF_ERROR(need(b.mine, b.mine_name, any));
    if (!b.whole_here) return absl::OkStatus();
    MUSTER_RETURN_IF_ERROR(need(b.whole, b.whole_name, any));
    return disjoint_or_slot(b.mine, b.mine_bytes, b.whole, b.whole_bytes,
                            b.slot);
  };
  // The output of the root only.
  const char* const root_output = "output on the root";
  switch (op.kind) {
    case OpKind::kAllReduce:
      MUSTER_RETURN_IF_ERROR(check({op.input, "input", bytes, op.output,
                                    "output", bytes, op.output, true}));
      break;
    case OpKind::kReduce:
      MUSTER_RETURN_IF_ERROR(check({op.input, "input", bytes, op.output,
                                    root_output, bytes, op.output, is_root}));
      break;
    case OpKind::kBroadcast:
      MUSTER_RETURN_IF_ERROR(need(op.output, "data", any));
      break;
    case OpKind::kAllGather:
    case OpKind::kGather:
      MUSTER_RETURN_IF_ERROR(
          check({op.input, "input", bytes, op.output,
                 op.kind == OpKind::kGather ? root_output : "output", all_bytes,
                 own_block(op.output, config_.rank * bytes),
                 op.kind == OpKind::kAllGather || is_root}));
      break;
    case OpKind::kAllGatherV: {
      if (op.counts.size() != static_cast<size_t>(n)) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, "counts has ", op.counts.size(), " entries, not ", n));
      }
      size_t total = 0;
      size_t offset = 0;
      for (int r = 0; r < n; ++r) {
        if (op.counts[r] > std::numeric_limits<size_t>::max() / size - total) {
          return absl::InvalidArgumentError(
              absl::StrCat(what, "counts are too large"));
        }
        if (r == config_.rank) offset = total;
        total += op.counts[r];
      }
      op.count = op.counts[config_.rank];
      const size_t mine = op.count * size;
      MUSTER_RETURN_IF_ERROR(need(op.input, "input", mine > 0));
      MUSTER_RETURN_IF_ERROR(need(op.output, "output", total > 0));
      MUSTER_RETURN_IF_ERROR(
          disjoint_or_slot(op.input, mine, op.output, total * size,
                           own_block(op.output, offset * size)));
      break;
    }
    case OpKind::kScatter:
    case OpKind::kReduceScatter:
      MUSTER_RETURN_IF_ERROR(
          check({op.output, "output", bytes, op.input,
                 op.kind == OpKind::kScatter ? "input on the root" : "input",
                 all_bytes, own_block(op.input, config_.rank * bytes),
                 op.kind == OpKind::kReduceScatter || is_root}));
      break;
    case OpKind::kAllToAll:
      MUSTER_RETURN_IF_ERROR(check({op.input, "input", all_bytes, op.output,
                                    "output", all_bytes, nullptr, true}));
      break;
    case OpKind::kBarrier:
      break;
    case OpKind::kSend:
      MUSTER_RETURN_IF_ERROR(need(op.input, "data", any));
      break;
    case OpKind::kRecv:
      MUSTER_RETURN_IF_ERROR(need(op.output, "data", any));
      break;
  }
  // The call's timeout, bounded by the communicator's (which bounds the
  // backend's own waits).
  const absl::Duration limit = config_.options.timeout;
  op.timeout =
      op.timeout > absl::ZeroDuration() ? std::min(op.timeout, limit) : limit;
  return absl::OkStatus();
}

}  // namespace muster::comm::internal
