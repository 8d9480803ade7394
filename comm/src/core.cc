#include "comm/src/core.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "muster/common/logging.h"
#include "muster/common/status.h"

namespace muster::comm::internal {
namespace {

// How long a failed operation waits for the monitor's verdict, which names the
// peer that caused it. A peer's death reaches the monitor's connection at the
// same moment it reaches Gloo's, so this is only a bound.
constexpr absl::Duration kVerdictGrace = absl::Milliseconds(300);
// How long an echoed failure (backend.h) waits for the verdict: the aborting
// peer sends it at once, but on a loaded machine it took over 300 ms once in
// 120 runs of comm_kill_load_test.
constexpr absl::Duration kEchoVerdictGrace = absl::Seconds(2);

constexpr absl::string_view kEchoPayload = "type.muster.dev/comm.EchoedFailure";

}  // namespace

absl::string_view OpName(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce:
      return "AllReduce";
    case OpKind::kReduce:
      return "Reduce";
    case OpKind::kBroadcast:
      return "Broadcast";
    case OpKind::kAllGather:
      return "AllGather";
    case OpKind::kAllGatherV:
      return "AllGatherV";
    case OpKind::kGather:
      return "Gather";
    case OpKind::kScatter:
      return "Scatter";
    case OpKind::kReduceScatter:
      return "ReduceScatter";
    case OpKind::kAllToAll:
      return "AllToAll";
    case OpKind::kBarrier:
      return "Barrier";
    case OpKind::kSend:
      return "Send";
    case OpKind::kRecv:
      return "Recv";
  }
  return "unknown";
}

absl::Status EchoedFailure(absl::string_view message) {
  absl::Status status = absl::AbortedError(message);
  status.SetPayload(kEchoPayload, absl::Cord());
  return status;
}

bool IsEchoedFailure(const absl::Status& status) {
  return status.GetPayload(kEchoPayload).has_value();
}

std::string DescribeOp(const Op& op) {
  if (op.kind == OpKind::kBarrier) return "Barrier()";
  std::string out = absl::StrCat(OpName(op.kind), "(");
  if (op.kind == OpKind::kAllGatherV) {
    size_t total = 0;
    for (size_t c : op.counts) total += c;
    absl::StrAppend(&out, total);
  } else {
    absl::StrAppend(&out, op.count);
  }
  absl::StrAppend(&out, " x ", DataTypeName(op.dtype));
  switch (op.kind) {
    case OpKind::kAllReduce:
    case OpKind::kReduceScatter:
      absl::StrAppend(&out, ", ", ReduceOpName(op.op));
      break;
    case OpKind::kReduce:
      absl::StrAppend(&out, ", ", ReduceOpName(op.op), ", root ", op.root);
      break;
    case OpKind::kBroadcast:
    case OpKind::kGather:
    case OpKind::kScatter:
      absl::StrAppend(&out, ", root ", op.root);
      break;
    case OpKind::kSend:
      absl::StrAppend(&out, " to rank ", op.root, ", tag ", op.tag);
      break;
    case OpKind::kRecv:
      absl::StrAppend(&out, " from rank ", op.root, ", tag ", op.tag);
      break;
    default:
      break;
  }
  return out + ")";
}

// ---- WorkState ----

void WorkState::Finish(absl::Status status) {
  absl::MutexLock lock(&mu_);
  done_ = true;
  status_ = std::move(status);
}

absl::Status WorkState::Wait(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(absl::Condition(&done_), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("Work::Wait: the operation is still running after ",
                     absl::FormatDuration(timeout)));
  }
  return status_;
}

bool WorkState::Done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

// ---- CommCore ----

CommCore::CommCore(CoreConfig config)
    : config_(std::move(config)),
      who_(absl::StrCat("rank ", config_.rank, "/", config_.world_size)),
      progress_(ProgressFile::ForOptions(config_.options.progress_file)) {}

CommCore::~CommCore() { Shutdown(); }

absl::string_view CommCore::backend_name() const {
  return backends_.host != nullptr ? backends_.host->name()
                                   : backends_.device->name();
}

absl::StatusOr<std::unique_ptr<CommCore>> CommCore::Connect(
    CoreConfig config, const BackendsConnector& connect,
    std::unique_ptr<Backend> previous_device) {
  std::unique_ptr<CommCore> core(new CommCore(std::move(config)));
  core->backends_.previous_device = std::move(previous_device);
  absl::Status status = core->ConnectImpl(connect);
  if (core->backends_.previous_device != nullptr) {
    core->backends_.previous_device->Close();
    core->backends_.previous_device.reset();
  }
  if (!status.ok()) return status;
  return core;
}

absl::Status CommCore::ConnectImpl(const BackendsConnector& connect) {
  const absl::Time deadline =
      std::min(absl::Now() + config_.options.timeout, config_.connect_deadline);
  MUSTER_RETURN_IF_ERROR(connect(config_, deadline, backends_));
  if (config_.world_size > 1 && !config_.without_monitor) {
    PeerMonitorOptions m;
    m.rank = config_.rank;
    m.world_size = config_.world_size;
    m.bind_ip = config_.bind_ip;
    m.store = config_.store;
    m.key_prefix = config_.key_prefix;
    m.deadline = deadline;
    m.on_abort = [this](const absl::Status& why) { OnAbort(why); };
    absl::StatusOr<std::unique_ptr<PeerMonitor>> monitor =
        PeerMonitor::Start(std::move(m));
    if (!monitor.ok()) return monitor.status();
    monitor_ = std::move(*monitor);
  }
  // Gloo's connectFullMesh can return on one rank while a peer is still
  // finishing its handshake; a rank that then closed at once would reset the
  // peer's connection mid-connect. One barrier makes Connect return only when
  // every rank is connected.
  Op barrier;
  barrier.kind = OpKind::kBarrier;
  barrier.timeout = std::max(deadline - absl::Now(), absl::Milliseconds(1));
  absl::Status ready = Execute(barrier);
  if (!ready.ok()) {
    return Annotate(ready, "confirming that every rank is connected");
  }
  MUSTER_LOG(DEBUG) << who_ << ": connected (" << backend_name()
                    << (backends_.device != nullptr && backends_.host != nullptr
                            ? " + nccl"
                            : "")
                    << ")";
  return absl::OkStatus();
}

absl::StatusOr<Backend*> CommCore::Pick(const Op& op) {
  auto on_device = [this](const void* p) {
    return backends_.is_device_pointer != nullptr &&
           backends_.is_device_pointer(p);
  };
  if (backends_.device == nullptr) {
    if (backends_.host != nullptr &&
        (on_device(op.input) || on_device(op.output))) {
      return absl::FailedPreconditionError(
          "device memory needs the NCCL backend, which this communicator "
          "does not have (CommOptions::backend, and the warning at start-up)");
    }
    return backends_.host.get();
  }
  if (backends_.host == nullptr) return backends_.device.get();
  // Both: the memory decides.
  if (on_device(op.output) || on_device(op.input)) {
    return backends_.device.get();
  }
  return backends_.host.get();
}

absl::Status CommCore::CheckUsable(const Op& op) {
  absl::MutexLock lock(&mu_);
  return CheckUsableLocked(op);
}

absl::Status CommCore::CheckUsableLocked(const Op& op) {
  if (shut_down_) {
    return absl::FailedPreconditionError(
        absl::StrCat(who_, ": ", OpName(op.kind), " called after Shutdown()"));
  }
  MUSTER_RETURN_IF_ERROR(CheckRoundLocked(op));
  if (broken_.ok() && !abort_reason_.ok()) {
    // The monitor's verdict arrived while no operation was in flight.
    broken_ = absl::Status(abort_reason_.code(),
                           absl::StrCat(who_, ": ", abort_reason_.message()));
  }
  if (!broken_.ok()) {
    // Reported once as the failure it is (a lost peer); later calls name
    // the ended round (CheckRoundLocked).
    if (config_.round != nullptr) {
      config_.round->End(config_.round_generation, broken_);
    }
    return absl::AbortedError(absl::StrCat(
        who_, ": ", OpName(op.kind),
        ": the communicator is unusable after an earlier failure: ",
        broken_.message()));
  }
  return absl::OkStatus();
}

absl::Status CommCore::CheckRoundLocked(const Op& op) {
  if (config_.round == nullptr ||
      !config_.round->Ended(config_.round_generation)) {
    return absl::OkStatus();
  }
  return config_.round->EndedStatus(absl::StrCat(who_, ": ", OpName(op.kind)),
                                    config_.formed_round, config_.is_group);
}

absl::Status CommCore::BrokenStatus() {
  absl::MutexLock lock(&mu_);
  return !broken_.ok() ? broken_ : abort_reason_;
}

absl::Status CommCore::Execute(const Op& op, bool checked) {
  if (!checked) MUSTER_RETURN_IF_ERROR(CheckUsable(op));
  MUSTER_ASSIGN_OR_RETURN(Backend * backend, Pick(op));
  if (progress_ != nullptr) progress_->Begin(OpName(op.kind));
  const absl::Time deadline = absl::Now() + op.timeout;
  if (monitor_ != nullptr) monitor_->SetDeadline(deadline);
  absl::Status status = backend->Run(op, deadline);
  if (monitor_ != nullptr) monitor_->SetDeadline(absl::InfiniteFuture());
  if (progress_ != nullptr) progress_->End();
  if (status.ok()) return status;
  return Fail(op, std::move(status));
}

absl::StatusOr<std::unique_ptr<PendingP2P>> CommCore::Post(const Op& op) {
  MUSTER_RETURN_IF_ERROR(CheckUsable(op));
  MUSTER_ASSIGN_OR_RETURN(Backend * backend, Pick(op));
  absl::StatusOr<std::unique_ptr<PendingP2P>> pending;
  {
    // Under the lock: Shutdown cannot close the backend meanwhile. Posting
    // never blocks.
    absl::MutexLock lock(&mu_);
    if (shut_down_) {
      return absl::FailedPreconditionError(absl::StrCat(
          who_, ": ", OpName(op.kind), " called after Shutdown()"));
    }
    pending = backend->Post(op);
  }
  if (!pending.ok()) return Fail(op, pending.status());
  return pending;
}

absl::Status CommCore::FinishP2P(const Op& op, PendingP2P& pending) {
  if (progress_ != nullptr) progress_->Begin(OpName(op.kind));
  absl::Status status = pending.Wait(absl::Now() + op.timeout);
  if (progress_ != nullptr) progress_->End();
  if (status.ok()) return status;
  return Fail(op, std::move(status));
}

void CommCore::OnAbort(const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    if (!abort_reason_.ok()) return;
    abort_reason_ = why;
  }
  if (backends_.host != nullptr) backends_.host->Abort(why);
  if (backends_.device != nullptr) backends_.device->Abort(why);
}

absl::Status CommCore::Fail(const Op& op, absl::Status status) {
  const std::string what = absl::StrCat(who_, ": ", DescribeOp(op), ": ");
  if (absl::IsInvalidArgument(status)) {
    return absl::InvalidArgumentError(absl::StrCat(what, status.message()));
  }
  if (absl::IsUnimplemented(status)) {
    // Refused before any byte moved, the same way on every rank (the
    // mesh-only backend): the communicator stays usable.
    return status;
  }
  absl::Status result;
  bool started_here = true;
  {
    absl::MutexLock lock(&mu_);
    // A peer's death reaches Gloo and the monitor at the same moment; the
    // monitor's verdict names the peer, Gloo's error often does not.
    if (monitor_ != nullptr && abort_reason_.ok() &&
        !absl::IsDeadlineExceeded(status)) {
      mu_.AwaitWithTimeout(
          absl::Condition(
              +[](absl::Status* s) { return !s->ok(); }, &abort_reason_),
          IsEchoedFailure(status) ? kEchoVerdictGrace : kVerdictGrace);
    }
    const std::string too_long = absl::StrCat(
        what, "did not finish within ", absl::FormatDuration(op.timeout),
        " (the call's timeout: CallOptions::timeout, MUSTER_COMM_TIMEOUT "
        "or CommOptions::timeout)");
    if (!abort_reason_.ok()) {
      if (absl::IsDeadlineExceeded(abort_reason_)) {
        result = absl::DeadlineExceededError(too_long);
      } else {
        result = absl::Status(abort_reason_.code(),
                              absl::StrCat(what, abort_reason_.message()));
        started_here = false;
      }
    } else {
      // The backend saw the deadline before the monitor did (the shared-
      // memory transport checks it in its waits): the same words, with the
      // backend's detail.
      std::string text = absl::IsDeadlineExceeded(status)
                             ? absl::StrCat(too_long, ": ", status.message())
                             : absl::StrCat(what, status.message());
      if (monitor_ != nullptr) {
        std::vector<int> gone;
        for (int r = 0; r < config_.world_size; ++r) {
          if (monitor_->PeerShutDown(r)) gone.push_back(r);
        }
        if (!gone.empty()) {
          absl::StrAppend(&text, " (", gone.size() == 1 ? "rank " : "ranks ",
                          absl::StrJoin(gone, ", "),
                          gone.size() == 1 ? " has" : " have",
                          " shut down its communicator)");
        }
      }
      result = absl::Status(status.code(), text);
    }
    if (broken_.ok()) broken_ = result;
  }
  if (config_.round != nullptr) {
    config_.round->End(config_.round_generation, result);
  }
  if (started_here) {
    MUSTER_LOG(DEBUG) << result;
    if (monitor_ != nullptr) monitor_->TellPeers(result);
    if (backends_.host != nullptr) backends_.host->Abort(result);
    if (backends_.device != nullptr) backends_.device->Abort(result);
  }
  return result;
}

absl::Status CommCore::RunBlocking(const Op& op) {
  if (op.IsPointToPoint()) {
    {
      absl::MutexLock lock(&mu_);
      ++sync_p2p_;
    }
    absl::Status status;
    absl::StatusOr<std::unique_ptr<PendingP2P>> pending = Post(op);
    status = pending.ok() ? FinishP2P(op, **pending) : pending.status();
    absl::MutexLock lock(&mu_);
    --sync_p2p_;
    return status;
  }
  {
    absl::MutexLock lock(&mu_);
    if (!queue_.empty() || running_) {
      mu_.Await(absl::Condition(
          +[](CommCore* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) {
            return c->queue_.empty() && !c->running_;
          },
          this));
    }
    MUSTER_RETURN_IF_ERROR(CheckUsableLocked(op));
    running_ = true;
  }
  absl::Status status = Execute(op, /*checked=*/true);
  absl::MutexLock lock(&mu_);
  running_ = false;
  return status;
}

absl::Status CommCore::RunAsync(Op op, std::shared_ptr<WorkState> state) {
  {
    absl::MutexLock lock(&mu_);
    MUSTER_RETURN_IF_ERROR(CheckRoundLocked(op));
  }
  if (op.IsPointToPoint()) {
    MUSTER_ASSIGN_OR_RETURN(std::unique_ptr<PendingP2P> pending, Post(op));
    absl::MutexLock lock(&mu_);
    p2p_queue_.push_back(
        Task{std::move(op), std::move(state), std::move(pending)});
    if (!completion_.joinable()) {
      completion_ = std::thread([this] { CompletionLoop(); });
    }
    return absl::OkStatus();
  }
  absl::MutexLock lock(&mu_);
  if (shut_down_) {
    return absl::FailedPreconditionError(
        absl::StrCat(who_, ": ", OpName(op.kind), " called after Shutdown()"));
  }
  queue_.push_back(Task{std::move(op), std::move(state), nullptr});
  if (!executor_.joinable()) {
    executor_ = std::thread([this] { ExecutorLoop(); });
  }
  return absl::OkStatus();
}

void CommCore::ExecutorLoop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(
        +[](CommCore* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) {
          return c->stop_threads_ || (!c->queue_.empty() && !c->running_);
        },
        this));
    if (queue_.empty() || running_) return;  // stop_threads_
    Task task = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    mu_.Unlock();
    absl::Status status = Execute(task.op);
    task.state->Finish(std::move(status));
    mu_.Lock();
    running_ = false;
  }
}

void CommCore::CompletionLoop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(
        +[](CommCore* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) {
          return c->stop_threads_ || !c->p2p_queue_.empty();
        },
        this));
    if (p2p_queue_.empty()) return;
    Task& task = p2p_queue_.front();
    mu_.Unlock();
    absl::Status status = FinishP2P(task.op, *task.pending);
    task.pending.reset();
    task.state->Finish(std::move(status));
    mu_.Lock();
    p2p_queue_.pop_front();  // Only now: Shutdown waits for an empty queue.
  }
}

int CommCore::NextGroupSerial(const std::string& list) {
  absl::MutexLock lock(&mu_);
  return group_serials_[list]++;
}

void CommCore::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    // Queued operations finish first (each bounded by its timeout).
    mu_.Await(absl::Condition(
        +[](CommCore* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) {
          return c->queue_.empty() && !c->running_ && c->p2p_queue_.empty() &&
                 c->sync_p2p_ == 0;
        },
        this));
    shut_down_ = true;
    stop_threads_ = true;
  }
  if (executor_.joinable()) executor_.join();
  if (completion_.joinable()) completion_.join();
  bool healthy = false;
  {
    absl::MutexLock lock(&mu_);
    // A communicator of an ended round (a group after Recover) says no
    // goodbye: its peers may be gone or re-formed elsewhere.
    healthy = broken_.ok() && abort_reason_.ok() &&
              (config_.round == nullptr ||
               !config_.round->Ended(config_.round_generation));
  }
  if (healthy && backends_.host != nullptr && config_.world_size > 1) {
    // A collective can return on one rank while its last message to a peer
    // is still in this host's socket buffer; Gloo closes its pairs with a
    // reset, which discards that message, and the peer's collective fails
    // ("Connection closed by peer") though every rank called it. One barrier
    // first: a peer's barrier message arrives after the data it sent before
    // it, so when the barrier ends every peer has received everything. Bounded,
    // and best effort: a peer that never shuts down costs at most this wait.
    Op goodbye;
    goodbye.kind = OpKind::kBarrier;
    goodbye.timeout = std::min(config_.options.timeout, absl::Seconds(10));
    absl::Status s =
        backends_.host->Run(goodbye, absl::Now() + goodbye.timeout);
    if (!s.ok()) MUSTER_LOG(DEBUG) << who_ << ": shutdown barrier: " << s;
  }
  if (monitor_ != nullptr) monitor_->Stop();
  if (backends_.host != nullptr) backends_.host->Close();
  bool keep_device = false;
  {
    absl::MutexLock lock(&mu_);
    keep_device = keep_device_;
  }
  if (backends_.device != nullptr && !keep_device) backends_.device->Close();
}

std::unique_ptr<Backend> CommCore::EndForRecovery(const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    if (broken_.ok()) broken_ = why;
    keep_device_ = true;
  }
  if (backends_.host != nullptr) backends_.host->Abort(why);
  if (backends_.device != nullptr) backends_.device->Abort(why);
  Shutdown();  // No goodbye barrier: the communicator is broken.
  return std::move(backends_.device);
}

void CommCore::CrashForTesting() {
  if (monitor_ != nullptr) monitor_->CrashForTesting();
  const absl::Status crash = absl::AbortedError("crashed (test)");
  {
    absl::MutexLock lock(&mu_);
    if (broken_.ok()) broken_ = crash;
  }
  if (backends_.host != nullptr) backends_.host->Abort(crash);
  if (backends_.device != nullptr) backends_.device->Abort(crash);
}

}  // namespace muster::comm::internal
