#include "store/src/store_stream_service.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "muster/store/grpc_status.h"
#include "store/src/store_ops.h"

namespace muster::store {

// ---------------------------------------------------------------- Stream

namespace {

// Whether the op changes the store (its answer comes from the write's
// callback).
bool IsWrite(v1::StoreRequest::OpCase op) {
  return op == v1::StoreRequest::kSet || op == v1::StoreRequest::kAdd ||
         op == v1::StoreRequest::kCompareSet ||
         op == v1::StoreRequest::kMultiSet || op == v1::StoreRequest::kDelete;
}

// The op's own prefix field, used when StoreRequest.prefix is empty.
const std::string& OpPrefix(const v1::StoreRequest& r) {
  switch (r.op_case()) {
    case v1::StoreRequest::kSet:
      return r.set().prefix();
    case v1::StoreRequest::kGet:
      return r.get().prefix();
    case v1::StoreRequest::kAdd:
      return r.add().prefix();
    case v1::StoreRequest::kCompareSet:
      return r.compare_set().prefix();
    case v1::StoreRequest::kWait:
      return r.wait().prefix();
    case v1::StoreRequest::kMultiGet:
      return r.multi_get().prefix();
    case v1::StoreRequest::kMultiSet:
      return r.multi_set().prefix();
    case v1::StoreRequest::kDelete:
      return r.delete_().prefix();
    case v1::StoreRequest::kNumKeys:
      return r.num_keys().prefix();
    case v1::StoreRequest::OP_NOT_SET:
      break;
  }
  return r.prefix();
}

const absl::Status& StatusOf(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& result) {
  return result.status();
}

v1::StoreResponse ErrorResponse(uint64_t id, const absl::Status& status) {
  v1::StoreResponse r;
  r.set_id(id);
  r.set_code(static_cast<int32_t>(status.code()));
  r.set_message(std::string(status.message()));
  return r;
}

}  // namespace

void StoreService::StreamCore::Open(StreamReactor* reactor) {
  if (absl::Status gate = s_->CheckGate(context_); !gate.ok()) {
    absl::MutexLock lock(&mu_);
    finished_ = true;
    reactor->Finish(ToGrpcStatus(gate));
    return;
  }
  absl::Status refusal;
  if (!s_->Register(shared_from_this(), &refusal)) {
    absl::MutexLock lock(&mu_);
    finished_ = true;
    reactor->Finish(ToGrpcStatus(refusal));
    return;
  }
  absl::MutexLock lock(&mu_);
  reactor_ = reactor;
  if (ending_) {  // EndOpen or Shutdown came between Register and here
    MaybeFinishLocked();
    return;
  }
  // Tells the client its stream reached a serving musterd: what it writes from
  // now on may be applied (GrpcStore's rule for an Add in flight at failover).
  context_->AddInitialMetadata("muster-store-stream", "1");
  // The fencing token (StoreGate::epoch): a client that has seen a newer
  // leader's epoch does not take this stream's answers.
  if (s_->gate_ != nullptr) {
    context_->AddInitialMetadata(kEpochMetadataKey,
                                 absl::StrCat(s_->gate_->epoch()));
  }
  reactor_->StartSendInitialMetadata();
  StartReadLocked();
}

void StoreService::StreamCore::Kick() {
  absl::MutexLock lock(&mu_);
  StartWriteLocked();
  MaybeFinishLocked();
}

void StoreService::StreamCore::Detach() {
  {
    absl::MutexLock lock(&mu_);
    reactor_ = nullptr;
    finished_ = true;
  }
  s_->Unregister(this);
}

void StoreService::StreamCore::StartReadLocked() {
  if (reactor_ == nullptr || finished_ || ending_ || half_closed_ ||
      read_in_flight_) {
    return;
  }
  read_in_flight_ = true;
  reactor_->StartRead(&read_buf_);
}

void StoreService::StreamCore::StartWriteLocked() {
  if (reactor_ == nullptr || finished_ || ending_ || write_in_flight_ ||
      in_batch_ || queue_.responses_size() == 0) {
    return;
  }
  // Output fencing: no answer leaves while this musterd leads but cannot
  // confirm it lately (a paused process, etcd slow); the answers wait in the
  // queue for the tick after the confirmation (StoreService::ReleaseHeld),
  // or end with the stream when this replica was deposed (EndOpen).
  if (s_->gate_ != nullptr && !s_->gate_->serving()) return;
  writing_.Swap(&queue_);
  writing_bytes_ = queued_bytes_;
  write_in_flight_ = true;
  reactor_->StartWrite(&writing_);
}

// The stream's end as one finished RPC (the interceptor skips streams).
void StoreService::StreamCore::ObserveEnd(grpc::StatusCode code) {
  if (s_->metrics_ != nullptr) {
    s_->metrics_->Observe("/muster.v1.Store/Stream",
                          static_cast<absl::StatusCode>(code),
                          absl::Now() - started_);
  }
}

void StoreService::StreamCore::MaybeFinishLocked() {
  if (finished_ || reactor_ == nullptr || write_in_flight_) return;
  if (ending_) {
    finished_ = true;
    if (!end_leader_.empty()) {
      context_->AddTrailingMetadata(kLeaderMetadataKey, end_leader_);
    }
    reactor_->Finish(ToGrpcStatus(end_status_));
    ObserveEnd(ToGrpcStatus(end_status_).error_code());
  } else if (half_closed_ && in_flight_ == 0 && !in_batch_ &&
             queue_.responses_size() == 0) {
    finished_ = true;
    reactor_->Finish(grpc::Status::OK);
    ObserveEnd(grpc::StatusCode::OK);
  }
}

void StoreService::StreamCore::OnReadDone(bool ok) {
  if (!ok) {  // the client half-closed (or the call ended)
    absl::MutexLock lock(&mu_);
    read_in_flight_ = false;
    half_closed_ = true;
    MaybeFinishLocked();
    return;
  }
  if (read_buf_.requests_size() > limits_.max_batch) {
    End(absl::ResourceExhaustedError(absl::StrCat(
            "a Store stream message carries ", read_buf_.requests_size(),
            " requests, more than the limit of ", limits_.max_batch,
            " (StoreStreamLimits.max_batch): send fewer per message")),
        "");
    absl::MutexLock lock(&mu_);
    read_in_flight_ = false;
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    in_batch_ = true;
  }
  for (v1::StoreRequest& request : *read_buf_.mutable_requests()) {
    Handle(request);
  }
  read_buf_.Clear();
  absl::MutexLock lock(&mu_);
  in_batch_ = false;
  read_in_flight_ = false;
  StartWriteLocked();
  // A client that does not read its answers is held back by HTTP/2 flow
  // control once this stops reading; OnWriteDone reads on.
  if (queued_bytes_ < limits_.max_queued_bytes / 2) StartReadLocked();
  MaybeFinishLocked();
}

void StoreService::StreamCore::OnWriteDone(bool ok) {
  if (!ok) {
    End(absl::UnavailableError("the Store stream broke while answering"), "");
  }
  absl::MutexLock lock(&mu_);
  write_in_flight_ = false;
  queued_bytes_ -= writing_bytes_;
  writing_bytes_ = 0;
  writing_.Clear();
  StartWriteLocked();
  if (queued_bytes_ < limits_.max_queued_bytes / 2) StartReadLocked();
  MaybeFinishLocked();
}

void StoreService::StreamCore::End(const absl::Status& why,
                                   const std::string& leader) {
  std::vector<std::pair<KvStore::WaiterId, DeadlineScheduler::TimerId>> waits;
  {
    absl::MutexLock lock(&mu_);
    if (ending_ || finished_) return;
    ending_ = true;
    end_status_ = why.ok() ? absl::UnavailableError("the stream ended") : why;
    end_leader_ = leader;
    queued_bytes_ = writing_bytes_;  // the write in flight stays
    queue_.Clear();
    for (auto& [seq, w] : waits_) {
      if (w.waiter != 0) waits.emplace_back(w.waiter, w.timer);
    }
    MaybeFinishLocked();
  }
  // Their callbacks (WaitEnded) find the stream ending and drop the answers.
  for (const auto& [waiter, timer] : waits) {
    if (timer != 0) s_->scheduler_.Cancel(timer);
    s_->store_->CancelWait(waiter, why);
  }
}

void StoreService::StreamCore::Answer(v1::StoreResponse response,
                                      bool counted) {
  absl::MutexLock lock(&mu_);
  if (counted) --in_flight_;
  if (ending_ || finished_) return;
  int64_t bytes = static_cast<int64_t>(response.ByteSizeLong());
  if (queued_bytes_ + bytes > limits_.max_queued_bytes) {
    response = ErrorResponse(
        response.id(),
        absl::ResourceExhaustedError(absl::StrCat(
            "the answer (", bytes, " bytes) would pass the limit of ",
            limits_.max_queued_bytes,
            " bytes of answers queued on one Store stream "
            "(StoreStreamLimits.max_queued_bytes): read the answers, or ask "
            "for less at once")));
    bytes = static_cast<int64_t>(response.ByteSizeLong());
  }
  queued_bytes_ += bytes;
  queue_.add_responses()->Swap(&response);
  StartWriteLocked();
  MaybeFinishLocked();
}

template <typename Fill>
auto StoreService::StreamCore::WriteDone(uint64_t id, Fill fill) {
  return [self = shared_from_this(), id, fill = std::move(fill)](auto result) {
    v1::StoreResponse r;
    r.set_id(id);
    if (result.ok()) {
      fill(std::move(result), r);
    } else {
      r = ErrorResponse(id, StatusOf(result));
    }
    self->Answer(std::move(r));
  };
}

bool StoreService::StreamCore::Admit(const v1::StoreRequest& request,
                                     std::string* prefix) {
  const uint64_t id = request.id();
  // A standby serves nothing: the stream ends naming the leader, and the
  // client takes its ops there.
  if (s_->gate_ != nullptr && !s_->gate_->serving()) {
    if (absl::Status gate = s_->gate_->Check(); !gate.ok()) {
      End(gate, s_->gate_->leader());
      return false;
    }
  }
  bool over_limit = false;
  {
    absl::MutexLock lock(&mu_);
    if (ending_) return false;
    over_limit = in_flight_ >= limits_.max_in_flight;
    if (!over_limit) ++in_flight_;
  }
  if (over_limit) {
    Answer(ErrorResponse(id, absl::ResourceExhaustedError(absl::StrCat(
                                 "more than ", limits_.max_in_flight,
                                 " ops in flight on one Store stream "
                                 "(StoreStreamLimits.max_in_flight): wait for "
                                 "answers before sending more"))),
           /*counted=*/false);
    return false;
  }
  *prefix = request.prefix().empty() ? OpPrefix(request) : request.prefix();
  if (absl::Status check = s_->CheckNamespace(authorization_, *prefix);
      !check.ok()) {
    Answer(ErrorResponse(id, check));
    return false;
  }
  return true;
}

void StoreService::StreamCore::Handle(v1::StoreRequest& request) {
  std::string prefix;
  if (!Admit(request, &prefix)) return;
  if (s_->metrics_ != nullptr) s_->metrics_->CountStoreOp(StoreOpName(request));
  const absl::Status check = IsWrite(request.op_case())
                                 ? DispatchWrite(prefix, request)
                                 : DispatchRead(prefix, request);
  if (!check.ok()) Answer(ErrorResponse(request.id(), check));
}

// Set, Add, CompareSet, MultiSet and Delete: the write goes to the store, its
// answer comes from the callback. An error is the op's answer.
absl::Status StoreService::StreamCore::DispatchWrite(
    const std::string& prefix, v1::StoreRequest& request) {
  const uint64_t id = request.id();
  KvStore* store = s_->store_;
  switch (request.op_case()) {
    case v1::StoreRequest::kSet: {
      const v1::SetRequest& r = request.set();
      if (absl::Status check = CheckKey(r.key()); !check.ok()) return check;
      store->SetAsync(prefix, r.key(), r.value(),
                      WriteDone(id, [](absl::Status, v1::StoreResponse& out) {
                        out.mutable_set();
                      }));
      return absl::OkStatus();
    }
    case v1::StoreRequest::kAdd: {
      const v1::AddRequest& r = request.add();
      if (absl::Status check = CheckKey(r.key()); !check.ok()) return check;
      store->AddAsync(
          prefix, r.key(), r.delta(),
          WriteDone(id, [](absl::StatusOr<int64_t> v, v1::StoreResponse& out) {
            out.mutable_add()->set_value(*v);
          }));
      return absl::OkStatus();
    }
    case v1::StoreRequest::kCompareSet: {
      const v1::CompareSetRequest& r = request.compare_set();
      if (absl::Status check = CheckKey(r.key()); !check.ok()) return check;
      store->CompareSetAsync(
          prefix, r.key(), r.expected(), r.desired(),
          WriteDone(id,
                    [](absl::StatusOr<std::string> v, v1::StoreResponse& out) {
                      out.mutable_compare_set()->set_value(*std::move(v));
                    }));
      return absl::OkStatus();
    }
    case v1::StoreRequest::kMultiSet: {
      const v1::MultiSetRequest& r = request.multi_set();
      if (absl::Status check = CheckKeys(r.keys()); !check.ok()) return check;
      store->MultiSetAsync(
          prefix, ToVector(r.keys()), ToVector(r.values()),
          WriteDone(id, [](absl::Status, v1::StoreResponse& out) {
            out.mutable_multi_set();
          }));
      return absl::OkStatus();
    }
    case v1::StoreRequest::kDelete: {
      const v1::DeleteRequest& r = request.delete_();
      if (absl::Status check = CheckKey(r.key()); !check.ok()) return check;
      store->DeleteAsync(
          prefix, r.key(),
          WriteDone(id, [](absl::StatusOr<bool> v, v1::StoreResponse& out) {
            out.mutable_delete_()->set_deleted(*v);
          }));
      return absl::OkStatus();
    }
    default:
      return absl::InternalError("not a write");
  }
}

// NumKeys, Get, Wait and MultiGet: answered now, or parked as a wait when
// they have a timeout. An error is the op's answer.
absl::Status StoreService::StreamCore::DispatchRead(const std::string& prefix,
                                                    v1::StoreRequest& request) {
  const uint64_t id = request.id();
  KvStore* store = s_->store_;
  switch (request.op_case()) {
    case v1::StoreRequest::kNumKeys: {
      // ABORTED on a dropped namespace, as every other op.
      absl::StatusOr<int64_t> count = store->CountKeys(prefix);
      if (!count.ok()) return count.status();
      v1::StoreResponse out;
      out.set_id(id);
      out.mutable_num_keys()->set_count(*count);
      Answer(std::move(out));
      return absl::OkStatus();
    }
    case v1::StoreRequest::kGet: {
      const v1::GetRequest& r = request.get();
      absl::Status check =
          FirstError({CheckKey(r.key()), CheckTimeout(r.timeout_ms())});
      if (!check.ok()) return check;
      if (r.timeout_ms() > 0) {
        StartWait(id, prefix, {r.key()}, r.timeout_ms(), request.op_case(),
                  "Get");
        return absl::OkStatus();
      }
      absl::StatusOr<std::string> value = store->Get(prefix, r.key());
      if (!value.ok()) return value.status();
      v1::StoreResponse out;
      out.set_id(id);
      out.mutable_get()->set_value(*std::move(value));
      Answer(std::move(out));
      return absl::OkStatus();
    }
    case v1::StoreRequest::kWait: {
      const v1::WaitRequest& r = request.wait();
      absl::Status check =
          FirstError({CheckKeys(r.keys()), CheckTimeout(r.timeout_ms())});
      if (!check.ok()) return check;
      if (r.timeout_ms() > 0) {
        StartWait(id, prefix, ToVector(r.keys()), r.timeout_ms(),
                  request.op_case(), "Wait");
        return absl::OkStatus();
      }
      const std::vector<std::string> missing =
          s_->GetNow(prefix, r.keys(), /*values=*/nullptr);
      if (!missing.empty()) {
        return absl::DeadlineExceededError(absl::StrCat(
            "Wait in store namespace '", prefix,
            "' with no timeout (keys not set: ", absl::StrJoin(missing, ", "),
            ")"));
      }
      v1::StoreResponse out;
      out.set_id(id);
      out.mutable_wait();
      Answer(std::move(out));
      return absl::OkStatus();
    }
    case v1::StoreRequest::kMultiGet: {
      const v1::MultiGetRequest& r = request.multi_get();
      absl::Status check =
          FirstError({CheckKeys(r.keys()), CheckTimeout(r.timeout_ms())});
      if (!check.ok()) return check;
      if (r.timeout_ms() > 0) {
        StartWait(id, prefix, ToVector(r.keys()), r.timeout_ms(),
                  request.op_case(), "MultiGet");
        return absl::OkStatus();
      }
      v1::StoreResponse out;
      out.set_id(id);
      const std::vector<std::string> missing = s_->GetNow(
          prefix, r.keys(), out.mutable_multi_get()->mutable_values());
      if (!missing.empty()) {
        return absl::NotFoundError(
            absl::StrCat("keys not set in store namespace '", prefix,
                         "': ", absl::StrJoin(missing, ", ")));
      }
      Answer(std::move(out));
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          "the Store stream request carries no op (set, get, add, ...): a "
          "client newer than this musterd?");
  }
}

void StoreService::StreamCore::StartWait(uint64_t id, const std::string& ns,
                                         std::vector<std::string> keys,
                                         int64_t timeout_ms,
                                         v1::StoreRequest::OpCase op,
                                         absl::string_view what) {
  const absl::Duration timeout = absl::Milliseconds(timeout_ms);
  const absl::Time deadline = absl::Now() + timeout;
  uint64_t seq = 0;
  {
    absl::MutexLock lock(&mu_);
    seq = next_seq_++;
    waits_.emplace(seq, Waiting{});
  }
  KvStore* store = s_->store_;
  const KvStore::WaiterId waiter =
      store->WaitFor(ns, std::move(keys),
                     [self = shared_from_this(), seq, id,
                      op](absl::StatusOr<std::vector<std::string>> result) {
                       self->WaitEnded(seq, id, op, std::move(result));
                     });
  if (waiter == 0) return;  // WaitEnded ran already: the keys were there
  std::optional<absl::Status> cancel_now;
  {
    absl::MutexLock lock(&mu_);
    auto it = waits_.find(seq);
    if (it == waits_.end()) return;  // ended meanwhile (a Set elsewhere)
    it->second.waiter = waiter;
    if (ending_) {  // End ran before the waiter was known
      cancel_now = end_status_;
    } else {
      std::string message =
          absl::StrCat(what, " in store namespace '", ns, "' timed out after ",
                       absl::FormatDuration(timeout));
      it->second.timer = s_->scheduler_.Schedule(
          deadline, [store, waiter, message = std::move(message)] {
            store->CancelWait(waiter, absl::DeadlineExceededError(message));
          });
      // 0: the scheduler stopped (Shutdown), which ends this stream too.
      if (it->second.timer == 0) {
        cancel_now = absl::UnavailableError("the store is shutting down");
      }
    }
  }
  if (cancel_now.has_value()) store->CancelWait(waiter, *cancel_now);
}

void StoreService::StreamCore::WaitEnded(
    uint64_t seq, uint64_t id, v1::StoreRequest::OpCase op,
    absl::StatusOr<std::vector<std::string>> result) {
  DeadlineScheduler::TimerId timer = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = waits_.find(seq);
    if (it != waits_.end()) {
      timer = it->second.timer;
      waits_.erase(it);
    }
  }
  if (timer != 0) s_->scheduler_.Cancel(timer);
  if (!result.ok()) {
    Answer(ErrorResponse(id, result.status()));
    return;
  }
  v1::StoreResponse out;
  out.set_id(id);
  switch (op) {
    case v1::StoreRequest::kGet:
      out.mutable_get()->set_value(std::move((*result)[0]));
      break;
    case v1::StoreRequest::kMultiGet:
      for (std::string& v : *result) {
        out.mutable_multi_get()->add_values(std::move(v));
      }
      break;
    default:
      out.mutable_wait();
      break;
  }
  Answer(std::move(out));
}

}  // namespace muster::store
