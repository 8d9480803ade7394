// The public Communicator: argument packing into an Op, and the calls into
// CommCore (comm/src/core.h), which does the work.
#include "muster/comm/communicator.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/api/init.h"
#include "comm/src/backend.h"
#include "comm/src/core.h"
#include "muster/common/status.h"

namespace muster::comm {

using internal::Op;
using internal::OpKind;

// ---- Work ----

Work::Work(std::shared_ptr<internal::WorkState> state)
    : state_(std::move(state)) {}

Work::~Work() = default;

absl::Status Work::Wait(absl::Duration timeout) {
  return state_->Wait(timeout);
}

bool Work::Done() const { return state_->Done(); }

// ---- Communicator ----

Communicator::Communicator(std::unique_ptr<internal::CommCore> core)
    : core_(std::move(core)) {}

Communicator::~Communicator() { Shutdown(); }

int Communicator::rank() const { return core_->rank(); }
int Communicator::world_size() const { return core_->world_size(); }
absl::string_view Communicator::backend_name() const {
  return core_->backend_name();
}

void Communicator::Shutdown() { core_->Shutdown(); }

absl::Status Communicator::Run(Op op) {
  MUSTER_RETURN_IF_ERROR(core_->Validate(op));
  return core_->RunBlocking(op);
}

absl::StatusOr<std::unique_ptr<Work>> Communicator::Start(Op op) {
  MUSTER_RETURN_IF_ERROR(core_->Validate(op));
  auto state = std::make_shared<internal::WorkState>();
  MUSTER_RETURN_IF_ERROR(core_->RunAsync(std::move(op), state));
  return std::make_unique<Work>(std::move(state));
}

namespace {

// The fields of an Op that only some operations set.
struct OpExtras {
  ReduceOp reduce = ReduceOp::kSum;
  // The root of a rooted collective; the peer of Send and Recv.
  int root = 0;
  uint32_t tag = 0;
  // AllGatherV's per-rank counts.
  absl::Span<const size_t> counts = {};
};

// The one place where a call's arguments become an Op, for the blocking and
// the Start* form alike.
Op MakeOp(OpKind kind, const void* input, void* output, size_t count,
          DataType dtype, const CallOptions& call,
          const OpExtras& extras = {}) {
  Op op;
  op.kind = kind;
  op.input = input;
  op.output = output;
  op.count = count;
  op.dtype = dtype;
  op.op = extras.reduce;
  op.root = extras.root;
  op.tag = extras.tag;
  op.counts.assign(extras.counts.begin(), extras.counts.end());
  op.timeout = call.timeout;
  return op;
}

}  // namespace

absl::Status Communicator::AllReduce(const void* input, void* output,
                                     size_t count, DataType dtype, ReduceOp op,
                                     const CallOptions& call) {
  return Run(MakeOp(OpKind::kAllReduce, input, output, count, dtype, call,
                    {.reduce = op}));
}

absl::Status Communicator::Reduce(const void* input, void* output, size_t count,
                                  DataType dtype, ReduceOp op, int root,
                                  const CallOptions& call) {
  return Run(MakeOp(OpKind::kReduce, input, output, count, dtype, call,
                    {.reduce = op, .root = root}));
}

absl::Status Communicator::Broadcast(void* data, size_t count, DataType dtype,
                                     int root, const CallOptions& call) {
  return Run(MakeOp(OpKind::kBroadcast, data, data, count, dtype, call,
                    {.root = root}));
}

absl::Status Communicator::AllGather(const void* input, void* output,
                                     size_t count, DataType dtype,
                                     const CallOptions& call) {
  return Run(MakeOp(OpKind::kAllGather, input, output, count, dtype, call));
}

absl::Status Communicator::AllGatherV(const void* input, void* output,
                                      absl::Span<const size_t> counts,
                                      DataType dtype, const CallOptions& call) {
  return Run(MakeOp(OpKind::kAllGatherV, input, output, 0, dtype, call,
                    {.counts = counts}));
}

absl::Status Communicator::Gather(const void* input, void* output, size_t count,
                                  DataType dtype, int root,
                                  const CallOptions& call) {
  return Run(MakeOp(OpKind::kGather, input, output, count, dtype, call,
                    {.root = root}));
}

absl::Status Communicator::Scatter(const void* input, void* output,
                                   size_t count, DataType dtype, int root,
                                   const CallOptions& call) {
  return Run(MakeOp(OpKind::kScatter, input, output, count, dtype, call,
                    {.root = root}));
}

absl::Status Communicator::ReduceScatter(const void* input, void* output,
                                         size_t count, DataType dtype,
                                         ReduceOp op, const CallOptions& call) {
  return Run(MakeOp(OpKind::kReduceScatter, input, output, count, dtype, call,
                    {.reduce = op}));
}

absl::Status Communicator::AllToAll(const void* input, void* output,
                                    size_t count, DataType dtype,
                                    const CallOptions& call) {
  return Run(MakeOp(OpKind::kAllToAll, input, output, count, dtype, call));
}

absl::Status Communicator::Barrier(const CallOptions& call) {
  return Run(
      MakeOp(OpKind::kBarrier, nullptr, nullptr, 0, DataType::kFloat32, call));
}

absl::Status Communicator::Send(const void* data, size_t count, DataType dtype,
                                int peer, uint32_t tag,
                                const CallOptions& call) {
  return Run(MakeOp(OpKind::kSend, data, nullptr, count, dtype, call,
                    {.root = peer, .tag = tag}));
}

absl::Status Communicator::Recv(void* data, size_t count, DataType dtype,
                                int peer, uint32_t tag,
                                const CallOptions& call) {
  return Run(MakeOp(OpKind::kRecv, nullptr, data, count, dtype, call,
                    {.root = peer, .tag = tag}));
}

absl::StatusOr<std::unique_ptr<Work>> Communicator::StartAllReduce(
    const void* input, void* output, size_t count, DataType dtype, ReduceOp op,
    const CallOptions& call) {
  return Start(MakeOp(OpKind::kAllReduce, input, output, count, dtype, call,
                      {.reduce = op}));
}

absl::StatusOr<std::unique_ptr<Work>> Communicator::StartReduce(
    const void* input, void* output, size_t count, DataType dtype, ReduceOp op,
    int root, const CallOptions& call) {
  return Start(MakeOp(OpKind::kReduce, input, output, count, dtype, call,
                      {.reduce = op, .root = root}));
}

absl::StatusOr<std::unique_ptr<Work>> Communicator::StartBroadcast(
    void* data, size_t count, DataType dtype, int root,
    const CallOptions& call) {
  return Start(MakeOp(OpKind::kBroadcast, data, data, count, dtype, call,
                      {.root = root}));
}

absl::StatusOr<std::unique_ptr<Work>> Communicator::StartAllGather(
    const void* input, void* output, size_t count, DataType dtype,
    const CallOptions& call) {
  return Start(MakeOp(OpKind::kAllGather, input, output, count, dtype, call));
}

absl::StatusOr<std::unique_ptr<Work>> Communicator::StartAllGatherV(
    const void* input, void* output, absl::Span<const size_t> counts,
    DataType dtype, const CallOptions& call) {
  return Start(MakeOp(OpKind::kAllGatherV, input, output, 0, dtype, call,
                      {.counts = counts}));
}

absl::StatusOr<std::unique_ptr<Work>> Communicator::StartGather(
    const void* input, void* output, size_t count, DataType dtype, int root,
    const CallOptions& call) {
  return Start(MakeOp(OpKind::kGather, input, output, count, dtype, call,
                      {.root = root}));
}

absl::StatusOr<std::unique_ptr<Work>> Communicator::StartScatter(
    const void* input, void* output, size_t count, DataType dtype, int root,
    const CallOptions& call) {
  return Start(MakeOp(OpKind::kScatter, input, output, count, dtype, call,
                      {.root = root}));
}

absl::StatusOr<std::unique_ptr<Work>> Communicator::StartReduceScatter(
    const void* input, void* output, size_t count, DataType dtype, ReduceOp op,
    const CallOptions& call) {
  return Start(MakeOp(OpKind::kReduceScatter, input, output, count, dtype, call,
                      {.reduce = op}));
}

absl::StatusOr<std::unique_ptr<Work>> Communicator::StartAllToAll(
    const void* input, void* output, size_t count, DataType dtype,
    const CallOptions& call) {
  return Start(MakeOp(OpKind::kAllToAll, input, output, count, dtype, call));
}

absl::StatusOr<std::unique_ptr<Work>> Communicator::StartBarrier(
    const CallOptions& call) {
  return Start(
      MakeOp(OpKind::kBarrier, nullptr, nullptr, 0, DataType::kFloat32, call));
}

absl::StatusOr<std::unique_ptr<Work>> Communicator::StartSend(
    const void* data, size_t count, DataType dtype, int peer, uint32_t tag,
    const CallOptions& call) {
  return Start(MakeOp(OpKind::kSend, data, nullptr, count, dtype, call,
                      {.root = peer, .tag = tag}));
}

absl::StatusOr<std::unique_ptr<Work>> Communicator::StartRecv(
    void* data, size_t count, DataType dtype, int peer, uint32_t tag,
    const CallOptions& call) {
  return Start(MakeOp(OpKind::kRecv, nullptr, data, count, dtype, call,
                      {.root = peer, .tag = tag}));
}

// ---- Subgroups ----

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::NewGroup(
    absl::Span<const int> ranks) {
  return NewGroup(ranks, core_->config().options);
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::NewGroup(
    absl::Span<const int> ranks, CommOptions options) {
  const std::string who = core_->who();
  if (ranks.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": NewGroup: the list of ranks is empty"));
  }
  std::vector<int> sorted(ranks.begin(), ranks.end());
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= world_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": NewGroup: rank ", sorted[i], " is outside [0, ",
                       world_size(), ")"));
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, ": NewGroup: rank ", sorted[i], " is listed twice"));
    }
  }
  const auto me = std::find(sorted.begin(), sorted.end(), rank());
  if (me == sorted.end()) return std::unique_ptr<Communicator>();
  if (core_->IsShutDown()) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, ": NewGroup called after Shutdown()"));
  }
  const internal::CoreConfig& parent_config = core_->config();
  if (parent_config.round != nullptr &&
      parent_config.round->Ended(parent_config.round_generation)) {
    return parent_config.round->EndedStatus(absl::StrCat(who, ": NewGroup"),
                                            parent_config.formed_round,
                                            parent_config.is_group);
  }
  const std::string list = absl::StrJoin(sorted, ",");
  const int serial = core_->NextGroupSerial(list);
  const internal::CoreConfig& parent = core_->config();
  const std::string key_root =
      absl::StrCat(parent.key_prefix, "group/", list, "/", serial, "/");
  // A group belongs to its parent's round: it ends with it, and is made
  // again after Recover (communicator.h, IN-PLACE RECOVERY).
  internal::CoreConfig base;
  base.round = parent.round;
  base.is_group = true;
  absl::StatusOr<std::unique_ptr<Communicator>> group =
      internal::CreateCommunicator(parent.store,
                                   static_cast<int>(me - sorted.begin()),
                                   static_cast<int>(sorted.size()), options,
                                   parent.all_local, key_root, std::move(base));
  if (!group.ok()) {
    return Annotate(group.status(),
                    absl::StrCat(who, ": NewGroup({", list, "})"));
  }
  return group;
}

namespace internal {

void CrashForTesting(Communicator& comm) { comm.core_->CrashForTesting(); }

}  // namespace internal

}  // namespace muster::comm
