#include "rendezvous/src/store_service.h"

#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "muster/common/logging.h"
#include "rendezvous/src/grpc_security.h"
#include "rendezvous/src/grpc_status.h"
#include "rendezvous/src/leader_gate.h"

namespace muster::rendezvous {

// ----------------------------------------------------------------
// DeadlineScheduler

DeadlineScheduler::DeadlineScheduler() : thread_([this] { Loop(); }) {}

DeadlineScheduler::~DeadlineScheduler() { Stop(); }

DeadlineScheduler::TimerId DeadlineScheduler::Schedule(
    absl::Time when, absl::AnyInvocable<void()> fn) {
  absl::MutexLock lock(&mu_);
  if (stop_) return 0;
  TimerId id = next_id_++;
  bool earliest = timers_.empty() || when < timers_.begin()->first.first;
  timers_.emplace(std::make_pair(when, id), std::move(fn));
  deadlines_.emplace(id, when);
  if (earliest) cv_.Signal();
  return id;
}

void DeadlineScheduler::Cancel(TimerId id) {
  absl::AnyInvocable<void()> dropped;  // destroyed outside the lock
  absl::MutexLock lock(&mu_);
  auto it = deadlines_.find(id);
  if (it == deadlines_.end()) return;
  auto timer = timers_.find(std::make_pair(it->second, id));
  if (timer != timers_.end()) {
    dropped = std::move(timer->second);
    timers_.erase(timer);
  }
  deadlines_.erase(it);
}

void DeadlineScheduler::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    cv_.Signal();
  }
  // call_once: a second caller waits until the thread is joined.
  std::call_once(join_once_, [this] { thread_.join(); });
  std::map<std::pair<absl::Time, TimerId>, absl::AnyInvocable<void()>> dropped;
  absl::MutexLock lock(&mu_);
  dropped.swap(timers_);
  deadlines_.clear();
}

int64_t DeadlineScheduler::Pending() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(timers_.size());
}

void DeadlineScheduler::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    if (timers_.empty()) {
      cv_.Wait(&mu_);
      continue;
    }
    auto first = timers_.begin();
    if (first->first.first > absl::Now()) {
      cv_.WaitWithDeadline(&mu_, first->first.first);
      continue;
    }
    absl::AnyInvocable<void()> fn = std::move(first->second);
    deadlines_.erase(first->first.second);
    timers_.erase(first);
    mu_.Unlock();
    fn();
    fn = nullptr;
    mu_.Lock();
  }
}

// ---------------------------------------------------------------- StoreService

namespace {

absl::Status CheckPrefix(const std::string& prefix) {
  if (prefix.empty()) {
    return absl::InvalidArgumentError(
        "the store prefix is empty: every Store call names its round's "
        "namespace "
        "(RoundReady.store_prefix, MUSTER_STORE_PREFIX)");
  }
  return absl::OkStatus();
}

absl::Status CheckKey(const std::string& key) {
  if (key.empty())
    return absl::InvalidArgumentError("the key is empty: name a key");
  return absl::OkStatus();
}

absl::Status CheckKeys(
    const google::protobuf::RepeatedPtrField<std::string>& keys) {
  for (int i = 0; i < keys.size(); ++i) {
    if (keys[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key ", i, " of ", keys.size(), " is empty: every key needs a name"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTimeout(int64_t timeout_ms) {
  if (timeout_ms < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout_ms is ", timeout_ms,
                     ": use 0 (do not wait) or a positive value"));
  }
  return absl::OkStatus();
}

// The first error among checks.
absl::Status FirstError(std::initializer_list<absl::Status> checks) {
  for (const absl::Status& s : checks) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                    const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

std::vector<std::string> ToVector(
    const google::protobuf::RepeatedPtrField<std::string>& field) {
  return std::vector<std::string>(field.begin(), field.end());
}

}  // namespace

// One waiting call. Parks a KvStore waiter whose callback (Ended) finishes the
// RPC; the deadline timer, OnCancel and Shutdown end the wait through
// KvStore::CancelWait, which calls Ended exactly once. The reactor lives until
// OnDone, which gRPC calls only after Finish, so `this` in the waiter's
// callback is valid; the timer holds only (store, id) and is a no-op once the
// wait ended.
class StoreService::WaitReactor final : public grpc::ServerUnaryReactor {
 public:
  // Fills the response from the values of the waited keys.
  using Fill = absl::AnyInvocable<void(std::vector<std::string> values)>;

  WaitReactor(StoreService* service, grpc::CallbackServerContext* context,
              Fill fill)
      : service_(service), context_(context), fill_(std::move(fill)) {}

  // `what` names the call in the deadline message ("Get", "Wait").
  void Start(const std::string& ns, std::vector<std::string> keys,
             absl::Duration timeout, absl::string_view what) {
    const absl::Time deadline = absl::Now() + timeout;
    KvStore* store = service_->store_;
    KvStore::WaiterId id =
        store->WaitFor(ns, std::move(keys),
                       [this](absl::StatusOr<std::vector<std::string>> result) {
                         Ended(std::move(result));
                       });
    if (id == 0) return;  // Ended ran already: the keys were there.
    std::optional<absl::Status> cancel_now;
    {
      absl::MutexLock lock(&mu_);
      id_ = id;
      if (!ended_) {
        absl::Status refusal;
        if (!service_->Track(id, &refusal)) {
          cancel_now = refusal;
        } else if (cancelled_) {
          cancel_now = absl::CancelledError("the client cancelled the wait");
        } else {
          std::string message =
              absl::StrCat(what, " in store namespace '", ns,
                           "' timed out after ", absl::FormatDuration(timeout));
          timer_ = service_->scheduler_.Schedule(
              deadline, [store, id, message = std::move(message)] {
                store->CancelWait(id, absl::DeadlineExceededError(message));
              });
        }
      }
    }
    if (cancel_now.has_value()) store->CancelWait(id, *cancel_now);
  }

  void OnCancel() override {
    KvStore::WaiterId id = 0;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      if (ended_) return;
      id = id_;
    }
    // id 0: Start has not parked the wait yet; it sees cancelled_ and cancels
    // it itself.
    if (id != 0) {
      service_->store_->CancelWait(
          id, absl::CancelledError("the client cancelled the wait"));
    }
  }

  void OnDone() override { delete this; }

 private:
  void Ended(absl::StatusOr<std::vector<std::string>> result) {
    KvStore::WaiterId id = 0;
    DeadlineScheduler::TimerId timer = 0;
    {
      absl::MutexLock lock(&mu_);
      ended_ = true;
      id = id_;
      timer = timer_;
    }
    if (id != 0) {
      // EndOpen named the leader: the client goes straight there.
      const std::string leader = service_->Untrack(id);
      if (!leader.empty())
        context_->AddTrailingMetadata(kLeaderMetadataKey, leader);
    }
    if (timer != 0) service_->scheduler_.Cancel(timer);
    if (result.ok()) {
      fill_(*std::move(result));
      Finish(grpc::Status::OK);
    } else {
      Finish(ToGrpcStatus(result.status()));
    }
  }

  StoreService* const service_;
  grpc::CallbackServerContext* const context_;
  Fill fill_;
  absl::Mutex mu_;
  KvStore::WaiterId id_ ABSL_GUARDED_BY(mu_) = 0;
  DeadlineScheduler::TimerId timer_ ABSL_GUARDED_BY(mu_) = 0;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

// ---------------------------------------------------------------- Stream

namespace {

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

// The state of one Store stream, shared by its reactor and by the callbacks of
// its ops: a KvStore wait or a replicated write may complete after the stream
// ended, so those hold a shared_ptr to this, never the reactor, which lives
// only until OnDone.
//
// Why StartRead, StartWrite and Finish are called under mu_: it makes "a write
// is in flight", "Finish was called" and the call itself one step, so no
// thread can write after Finish or finish during a write. gRPC 1.51 never runs
// a bidi reactor's reactions inline from these calls (their tags are not
// inlineable; OnDone is scheduled on its executor), so this cannot deadlock.
class StoreService::StreamCore final
    : public std::enable_shared_from_this<StreamCore> {
 public:
  StreamCore(StoreService* service, grpc::CallbackServerContext* context)
      : s_(service),
        limits_(service->stream_limits_),
        context_(context),
        credential_(CredentialOf(*context)) {}

  // Called once from the method handler with the new reactor: refuses the
  // stream (standby, shutdown) or accepts it and starts reading.
  void Open(StreamReactor* reactor);

  void OnReadDone(bool ok);
  void OnWriteDone(bool ok);
  // The client cancelled or the connection broke.
  void OnCancel() {
    End(absl::CancelledError("the client cancelled the Store stream"), "");
  }
  // OnDone: the reactor is gone.
  void Detach();

  // Ends the stream with `why` (leader, when not empty, in the trailing
  // metadata): pending waits end, unsent and later answers are dropped, and
  // the stream finishes once no write is in flight. No effect once ending.
  void End(const absl::Status& why, const std::string& leader);

 private:
  struct Waiting {
    KvStore::WaiterId waiter = 0;  // 0 until WaitFor returned
    DeadlineScheduler::TimerId timer = 0;
  };

  void Handle(v1::StoreRequest& request);
  // A wait for `keys` (Get, Wait, MultiGet with a timeout).
  void StartWait(uint64_t id, const std::string& ns,
                 std::vector<std::string> keys, int64_t timeout_ms,
                 v1::StoreRequest::OpCase op, absl::string_view what);
  void WaitEnded(uint64_t seq, uint64_t id, v1::StoreRequest::OpCase op,
                 absl::StatusOr<std::vector<std::string>> result);
  // Queues the answer of an op (counted: one that was accepted, in flight)
  // and writes it unless a write is in flight or a batch is being read.
  void Answer(v1::StoreResponse response, bool counted = true);
  // The answer of a write, from its async callback.
  template <typename Fill>
  auto WriteDone(uint64_t id, Fill fill);

  void StartWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finishes when ending and no write is in flight, or when the client
  // half-closed and every op was answered and written.
  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  StoreService* const s_;
  const StoreStreamLimits limits_;
  grpc::CallbackServerContext* const context_;  // used before Finish only
  const Credential credential_;
  v1::StoreRequests read_buf_;  // the one read in flight owns it

  absl::Mutex mu_;
  StreamReactor* reactor_ ABSL_GUARDED_BY(mu_) = nullptr;
  v1::StoreResponses queue_ ABSL_GUARDED_BY(mu_);
  v1::StoreResponses writing_ ABSL_GUARDED_BY(mu_);  // the write in flight
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;    // queue_ and writing_
  int64_t writing_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool read_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool in_batch_ ABSL_GUARDED_BY(mu_) = false;  // handling a read batch
  bool half_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status end_status_ ABSL_GUARDED_BY(mu_);
  std::string end_leader_ ABSL_GUARDED_BY(mu_);  // for the trailing metadata
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, Waiting> waits_ ABSL_GUARDED_BY(mu_);
};

class StoreService::StreamReactor final
    : public grpc::ServerBidiReactor<v1::StoreRequests, v1::StoreResponses> {
 public:
  explicit StreamReactor(std::shared_ptr<StreamCore> core)
      : core_(std::move(core)) {}
  void OnReadDone(bool ok) override { core_->OnReadDone(ok); }
  void OnWriteDone(bool ok) override { core_->OnWriteDone(ok); }
  void OnCancel() override { core_->OnCancel(); }
  void OnDone() override {
    core_->Detach();
    delete this;
  }

 private:
  const std::shared_ptr<StreamCore> core_;
};

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
  reactor_->StartSendInitialMetadata();
  StartReadLocked();
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
  writing_.Swap(&queue_);
  writing_bytes_ = queued_bytes_;
  write_in_flight_ = true;
  reactor_->StartWrite(&writing_);
}

void StoreService::StreamCore::MaybeFinishLocked() {
  if (finished_ || reactor_ == nullptr || write_in_flight_) return;
  if (ending_) {
    finished_ = true;
    if (!end_leader_.empty()) {
      context_->AddTrailingMetadata(kLeaderMetadataKey, end_leader_);
    }
    reactor_->Finish(ToGrpcStatus(end_status_));
  } else if (half_closed_ && in_flight_ == 0 && !in_batch_ &&
             queue_.responses_size() == 0) {
    finished_ = true;
    reactor_->Finish(grpc::Status::OK);
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

void StoreService::StreamCore::Handle(v1::StoreRequest& request) {
  const uint64_t id = request.id();
  // A standby serves nothing: the stream ends naming the leader, and the
  // client takes its ops there.
  if (s_->gate_ != nullptr && !s_->gate_->serving()) {
    if (absl::Status gate = s_->gate_->Check(); !gate.ok()) {
      End(gate, s_->gate_->leader());
      return;
    }
  }
  bool over_limit = false;
  {
    absl::MutexLock lock(&mu_);
    if (ending_) return;
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
    return;
  }
  const std::string prefix =
      request.prefix().empty() ? OpPrefix(request) : request.prefix();
  absl::Status check = s_->CheckNamespace(credential_, prefix);
  if (!check.ok()) {
    Answer(ErrorResponse(id, check));
    return;
  }
  KvStore* store = s_->store_;
  switch (request.op_case()) {
    case v1::StoreRequest::kSet: {
      const v1::SetRequest& r = request.set();
      if (check = CheckKey(r.key()); !check.ok()) break;
      store->SetAsync(prefix, r.key(), r.value(),
                      WriteDone(id, [](absl::Status, v1::StoreResponse& out) {
                        out.mutable_set();
                      }));
      return;
    }
    case v1::StoreRequest::kAdd: {
      const v1::AddRequest& r = request.add();
      if (check = CheckKey(r.key()); !check.ok()) break;
      store->AddAsync(
          prefix, r.key(), r.delta(),
          WriteDone(id, [](absl::StatusOr<int64_t> v, v1::StoreResponse& out) {
            out.mutable_add()->set_value(*v);
          }));
      return;
    }
    case v1::StoreRequest::kCompareSet: {
      const v1::CompareSetRequest& r = request.compare_set();
      if (check = CheckKey(r.key()); !check.ok()) break;
      store->CompareSetAsync(
          prefix, r.key(), r.expected(), r.desired(),
          WriteDone(id,
                    [](absl::StatusOr<std::string> v, v1::StoreResponse& out) {
                      out.mutable_compare_set()->set_value(*std::move(v));
                    }));
      return;
    }
    case v1::StoreRequest::kMultiSet: {
      const v1::MultiSetRequest& r = request.multi_set();
      if (check = CheckKeys(r.keys()); !check.ok()) break;
      store->MultiSetAsync(
          prefix, ToVector(r.keys()), ToVector(r.values()),
          WriteDone(id, [](absl::Status, v1::StoreResponse& out) {
            out.mutable_multi_set();
          }));
      return;
    }
    case v1::StoreRequest::kDelete: {
      const v1::DeleteRequest& r = request.delete_();
      if (check = CheckKey(r.key()); !check.ok()) break;
      store->DeleteAsync(
          prefix, r.key(),
          WriteDone(id, [](absl::StatusOr<bool> v, v1::StoreResponse& out) {
            out.mutable_delete_()->set_deleted(*v);
          }));
      return;
    }
    case v1::StoreRequest::kNumKeys: {
      v1::StoreResponse out;
      out.set_id(id);
      out.mutable_num_keys()->set_count(store->NumKeys(prefix));
      Answer(std::move(out));
      return;
    }
    case v1::StoreRequest::kGet: {
      const v1::GetRequest& r = request.get();
      check = FirstError({CheckKey(r.key()), CheckTimeout(r.timeout_ms())});
      if (!check.ok()) break;
      if (r.timeout_ms() > 0) {
        StartWait(id, prefix, {r.key()}, r.timeout_ms(), request.op_case(),
                  "Get");
        return;
      }
      absl::StatusOr<std::string> value = store->Get(prefix, r.key());
      if (!value.ok()) {
        check = value.status();
        break;
      }
      v1::StoreResponse out;
      out.set_id(id);
      out.mutable_get()->set_value(*std::move(value));
      Answer(std::move(out));
      return;
    }
    case v1::StoreRequest::kWait: {
      const v1::WaitRequest& r = request.wait();
      check = FirstError({CheckKeys(r.keys()), CheckTimeout(r.timeout_ms())});
      if (!check.ok()) break;
      if (r.timeout_ms() > 0) {
        StartWait(id, prefix, ToVector(r.keys()), r.timeout_ms(),
                  request.op_case(), "Wait");
        return;
      }
      const std::vector<std::string> missing =
          s_->GetNow(prefix, r.keys(), /*values=*/nullptr);
      if (!missing.empty()) {
        check = absl::DeadlineExceededError(absl::StrCat(
            "Wait in store namespace '", prefix,
            "' with no timeout (keys not set: ", absl::StrJoin(missing, ", "),
            ")"));
        break;
      }
      v1::StoreResponse out;
      out.set_id(id);
      out.mutable_wait();
      Answer(std::move(out));
      return;
    }
    case v1::StoreRequest::kMultiGet: {
      const v1::MultiGetRequest& r = request.multi_get();
      check = FirstError({CheckKeys(r.keys()), CheckTimeout(r.timeout_ms())});
      if (!check.ok()) break;
      if (r.timeout_ms() > 0) {
        StartWait(id, prefix, ToVector(r.keys()), r.timeout_ms(),
                  request.op_case(), "MultiGet");
        return;
      }
      v1::StoreResponse out;
      out.set_id(id);
      const std::vector<std::string> missing = s_->GetNow(
          prefix, r.keys(), out.mutable_multi_get()->mutable_values());
      if (!missing.empty()) {
        check = absl::NotFoundError(
            absl::StrCat("keys not set in store namespace '", prefix,
                         "': ", absl::StrJoin(missing, ", ")));
        break;
      }
      Answer(std::move(out));
      return;
    }
    case v1::StoreRequest::OP_NOT_SET:
      check = absl::InvalidArgumentError(
          "the Store stream request carries no op (set, get, add, ...): a "
          "client newer than this musterd?");
      break;
  }
  Answer(ErrorResponse(id, check));
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

// The gRPC handlers: thin, request in, KvStore call (through the service's
// checks and waits), response out.
class StoreService::Rpcs final : public v1::Store::CallbackService {
 public:
  explicit Rpcs(StoreService* service) : s_(service) {}

  grpc::ServerUnaryReactor* Set(grpc::CallbackServerContext* context,
                                const v1::SetRequest* request,
                                v1::SetResponse* /*response*/) override {
    absl::Status check =
        s_->CheckAccessAndKey(context, request->prefix(), request->key());
    if (!check.ok()) return FinishNow(context, check);
    // The write path may answer later, on the thread that committed it (a
    // replicated musterd): the reactor finishes from the callback.
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    s_->store_->SetAsync(request->prefix(), request->key(), request->value(),
                         [reactor](absl::Status status) {
                           reactor->Finish(ToGrpcStatus(status));
                         });
    return reactor;
  }

  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* context,
                                const v1::GetRequest* request,
                                v1::GetResponse* response) override {
    return s_->ServeRead(
        context, request->prefix(), CheckKey(request->key()),
        request->timeout_ms(),
        [&] {
          absl::StatusOr<std::string> value =
              s_->store_->Get(request->prefix(), request->key());
          if (value.ok()) response->set_value(*std::move(value));
          return value.status();
        },
        {request->key()}, "Get",
        [response](std::vector<std::string> values) {
          response->set_value(values[0]);
        });
  }

  grpc::ServerUnaryReactor* Add(grpc::CallbackServerContext* context,
                                const v1::AddRequest* request,
                                v1::AddResponse* response) override {
    absl::Status check =
        s_->CheckAccessAndKey(context, request->prefix(), request->key());
    if (!check.ok()) return FinishNow(context, check);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    s_->store_->AddAsync(request->prefix(), request->key(), request->delta(),
                         [reactor, response](absl::StatusOr<int64_t> value) {
                           if (value.ok()) response->set_value(*value);
                           reactor->Finish(ToGrpcStatus(value.status()));
                         });
    return reactor;
  }

  grpc::ServerUnaryReactor* CompareSet(
      grpc::CallbackServerContext* context,
      const v1::CompareSetRequest* request,
      v1::CompareSetResponse* response) override {
    absl::Status check =
        s_->CheckAccessAndKey(context, request->prefix(), request->key());
    if (!check.ok()) return FinishNow(context, check);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    s_->store_->CompareSetAsync(
        request->prefix(), request->key(), request->expected(),
        request->desired(),
        [reactor, response](absl::StatusOr<std::string> value) {
          if (value.ok()) response->set_value(*std::move(value));
          reactor->Finish(ToGrpcStatus(value.status()));
        });
    return reactor;
  }

  grpc::ServerUnaryReactor* Wait(grpc::CallbackServerContext* context,
                                 const v1::WaitRequest* request,
                                 v1::WaitResponse* /*response*/) override {
    return s_->ServeRead(
        context, request->prefix(), CheckKeys(request->keys()),
        request->timeout_ms(),
        [&] {
          const std::vector<std::string> missing = s_->GetNow(
              request->prefix(), request->keys(), /*values=*/nullptr);
          if (missing.empty()) return absl::OkStatus();
          return absl::DeadlineExceededError(absl::StrCat(
              "Wait in store namespace '", request->prefix(),
              "' with no timeout (keys not set: ", absl::StrJoin(missing, ", "),
              ")"));
        },
        ToVector(request->keys()), "Wait", [](std::vector<std::string>) {});
  }

  grpc::ServerUnaryReactor* MultiGet(grpc::CallbackServerContext* context,
                                     const v1::MultiGetRequest* request,
                                     v1::MultiGetResponse* response) override {
    return s_->ServeRead(
        context, request->prefix(), CheckKeys(request->keys()),
        request->timeout_ms(),
        [&] {
          const std::vector<std::string> missing = s_->GetNow(
              request->prefix(), request->keys(), response->mutable_values());
          if (missing.empty()) return absl::OkStatus();
          response->clear_values();
          return absl::NotFoundError(absl::StrCat(
              "keys not set in store namespace '", request->prefix(),
              "': ", absl::StrJoin(missing, ", ")));
        },
        ToVector(request->keys()), "MultiGet",
        [response](std::vector<std::string> values) {
          for (std::string& v : values) response->add_values(std::move(v));
        });
  }

  grpc::ServerUnaryReactor* MultiSet(
      grpc::CallbackServerContext* context, const v1::MultiSetRequest* request,
      v1::MultiSetResponse* /*response*/) override {
    absl::Status check =
        FirstError({s_->CheckAccess(context, request->prefix()),
                    CheckKeys(request->keys())});
    if (!check.ok()) return FinishNow(context, check);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    s_->store_->MultiSetAsync(request->prefix(), ToVector(request->keys()),
                              ToVector(request->values()),
                              [reactor](absl::Status status) {
                                reactor->Finish(ToGrpcStatus(status));
                              });
    return reactor;
  }

  grpc::ServerUnaryReactor* Delete(grpc::CallbackServerContext* context,
                                   const v1::DeleteRequest* request,
                                   v1::DeleteResponse* response) override {
    absl::Status check =
        s_->CheckAccessAndKey(context, request->prefix(), request->key());
    if (!check.ok()) return FinishNow(context, check);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    s_->store_->DeleteAsync(request->prefix(), request->key(),
                            [reactor, response](absl::StatusOr<bool> deleted) {
                              if (deleted.ok()) response->set_deleted(*deleted);
                              reactor->Finish(ToGrpcStatus(deleted.status()));
                            });
    return reactor;
  }

  grpc::ServerBidiReactor<v1::StoreRequests, v1::StoreResponses>* Stream(
      grpc::CallbackServerContext* context) override {
    auto core = std::make_shared<StreamCore>(s_, context);
    auto* reactor = new StreamReactor(core);
    core->Open(reactor);
    return reactor;
  }

  grpc::ServerUnaryReactor* NumKeys(grpc::CallbackServerContext* context,
                                    const v1::NumKeysRequest* request,
                                    v1::NumKeysResponse* response) override {
    absl::Status check = s_->CheckAccess(context, request->prefix());
    if (check.ok()) response->set_count(s_->store_->NumKeys(request->prefix()));
    return FinishNow(context, check);
  }

 private:
  StoreService* const s_;
};

StoreService::StoreService(KvStore* store, const JobAuthRegistry* auth,
                           StoreStreamLimits stream_limits)
    : store_(store),
      auth_(auth),
      stream_limits_(stream_limits),
      rpcs_(std::make_unique<Rpcs>(this)) {}

grpc::Service* StoreService::service() { return rpcs_.get(); }

absl::Status StoreService::CheckGate(
    grpc::CallbackServerContext* context) const {
  if (gate_ == nullptr || gate_->serving()) return absl::OkStatus();
  absl::Status refusal = gate_->Check();
  if (!refusal.ok()) gate_->AddLeaderTrailer(*context);
  return refusal;
}

absl::Status StoreService::CheckNamespace(const Credential& credential,
                                          const std::string& prefix) const {
  absl::Status valid = CheckPrefix(prefix);
  if (!valid.ok() || auth_ == nullptr) return valid;
  return auth_->CheckStore(credential, prefix);
}

absl::Status StoreService::CheckAccess(grpc::CallbackServerContext* context,
                                       const std::string& prefix) const {
  if (absl::Status gate = CheckGate(context); !gate.ok()) return gate;
  absl::Status valid = CheckPrefix(prefix);
  if (!valid.ok() || auth_ == nullptr) return valid;
  return auth_->CheckStore(CredentialOf(*context), prefix);
}

absl::Status StoreService::CheckAccessAndKey(
    grpc::CallbackServerContext* context, const std::string& prefix,
    const std::string& key) const {
  return FirstError({CheckAccess(context, prefix), CheckKey(key)});
}

std::vector<std::string> StoreService::GetNow(
    const std::string& prefix,
    const google::protobuf::RepeatedPtrField<std::string>& keys,
    google::protobuf::RepeatedPtrField<std::string>* values) const {
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    absl::StatusOr<std::string> value = store_->Get(prefix, key);
    if (!value.ok()) {
      missing.push_back(key);
    } else if (values != nullptr) {
      values->Add(*std::move(value));
    }
  }
  return missing;
}

grpc::ServerUnaryReactor* StoreService::ServeRead(
    grpc::CallbackServerContext* context, const std::string& prefix,
    absl::Status keys_valid, int64_t timeout_ms,
    absl::FunctionRef<absl::Status()> now, std::vector<std::string> keys,
    absl::string_view what, WaitReactor::Fill fill) {
  absl::Status check = FirstError(
      {CheckAccess(context, prefix), keys_valid, CheckTimeout(timeout_ms)});
  if (!check.ok()) return FinishNow(context, check);
  if (timeout_ms == 0) return FinishNow(context, now());
  absl::Status down = ShutdownStatus();
  if (!down.ok()) return FinishNow(context, down);
  auto* reactor = new WaitReactor(this, context, std::move(fill));
  reactor->Start(prefix, std::move(keys), absl::Milliseconds(timeout_ms), what);
  return reactor;
}

StoreService::~StoreService() {
  Shutdown(absl::UnavailableError("the store is shutting down"));
}

void StoreService::Shutdown(const absl::Status& status) {
  std::vector<KvStore::WaiterId> pending;
  std::vector<std::shared_ptr<StreamCore>> streams;
  absl::Status why;
  {
    absl::MutexLock lock(&mu_);
    if (!shutdown_.ok()) return;
    shutdown_ = status.ok()
                    ? absl::UnavailableError("the store is shutting down")
                    : status;
    why = shutdown_;
    for (const auto& [id, leader] : waits_) pending.push_back(id);
    for (const auto& [raw, stream] : streams_) streams.push_back(stream);
  }
  for (const auto& stream : streams) stream->End(why, "");
  scheduler_.Stop();
  for (KvStore::WaiterId id : pending) store_->CancelWait(id, why);
}

void StoreService::EndOpen(const absl::Status& why, const std::string& leader) {
  const absl::Status status =
      why.ok() ? absl::UnavailableError("this musterd stopped leading") : why;
  std::vector<KvStore::WaiterId> pending;
  std::vector<std::shared_ptr<StreamCore>> streams;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, named] : waits_) {
      named = leader;
      pending.push_back(id);
    }
    for (const auto& [raw, stream] : streams_) streams.push_back(stream);
  }
  for (const auto& stream : streams) stream->End(status, leader);
  for (KvStore::WaiterId id : pending) store_->CancelWait(id, status);
}

int64_t StoreService::PendingWaits() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(waits_.size());
}

int64_t StoreService::OpenStreams() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(streams_.size());
}

bool StoreService::Track(KvStore::WaiterId id, absl::Status* refusal) {
  absl::MutexLock lock(&mu_);
  if (!shutdown_.ok()) {
    *refusal = shutdown_;
    return false;
  }
  waits_.emplace(id, std::string());
  return true;
}

std::string StoreService::Untrack(KvStore::WaiterId id) {
  absl::MutexLock lock(&mu_);
  auto it = waits_.find(id);
  if (it == waits_.end()) return "";
  std::string leader = std::move(it->second);
  waits_.erase(it);
  return leader;
}

bool StoreService::Register(const std::shared_ptr<StreamCore>& stream,
                            absl::Status* refusal) {
  absl::MutexLock lock(&mu_);
  if (!shutdown_.ok()) {
    *refusal = shutdown_;
    return false;
  }
  streams_.emplace(stream.get(), stream);
  return true;
}

void StoreService::Unregister(StreamCore* stream) {
  std::shared_ptr<StreamCore> last;  // released outside the lock
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return;
  last = std::move(it->second);
  streams_.erase(it);
}

absl::Status StoreService::ShutdownStatus() const {
  absl::MutexLock lock(&mu_);
  return shutdown_;
}

}  // namespace muster::rendezvous
