#include "muster/store/store_service.h"

#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "muster/common/logging.h"
#include "muster/store/grpc_security.h"
#include "muster/store/grpc_status.h"
#include "store/src/store_stream_service.h"

namespace muster::store {

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

absl::Status FirstError(std::initializer_list<absl::Status> checks) {
  for (const absl::Status& s : checks) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

std::vector<std::string> ToVector(
    const google::protobuf::RepeatedPtrField<std::string>& field) {
  return std::vector<std::string>(field.begin(), field.end());
}

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

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                    const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
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
      service_->FinishFenced(this, grpc::Status::OK);
    } else {
      service_->FinishFenced(this, ToGrpcStatus(result.status()));
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
                         [this, reactor](absl::Status status) {
                           s_->FinishFenced(reactor, ToGrpcStatus(status));
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
    s_->store_->AddAsync(
        request->prefix(), request->key(), request->delta(),
        [this, reactor, response](absl::StatusOr<int64_t> value) {
          if (value.ok()) response->set_value(*value);
          s_->FinishFenced(reactor, ToGrpcStatus(value.status()));
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
        [this, reactor, response](absl::StatusOr<std::string> value) {
          if (value.ok()) response->set_value(*std::move(value));
          s_->FinishFenced(reactor, ToGrpcStatus(value.status()));
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
                              [this, reactor](absl::Status status) {
                                s_->FinishFenced(reactor, ToGrpcStatus(status));
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
    s_->store_->DeleteAsync(
        request->prefix(), request->key(),
        [this, reactor, response](absl::StatusOr<bool> deleted) {
          if (deleted.ok()) response->set_deleted(*deleted);
          s_->FinishFenced(reactor, ToGrpcStatus(deleted.status()));
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
    if (check.ok()) {
      // ABORTED on a dropped namespace, as every other op (a worker of an
      // ended round is told, not given 0).
      absl::StatusOr<int64_t> count = s_->store_->CountKeys(request->prefix());
      if (count.ok()) response->set_count(*count);
      check = count.status();
    }
    return FinishNow(context, check);
  }

 private:
  StoreService* const s_;
};

StoreService::StoreService(KvStore* store, const StoreAccess* auth,
                           StoreStreamLimits stream_limits)
    : store_(store),
      auth_(auth),
      stream_limits_(stream_limits),
      rpcs_(std::make_unique<Rpcs>(this)) {}

grpc::Service* StoreService::service() { return rpcs_.get(); }

void StoreService::FinishFenced(grpc::ServerUnaryReactor* reactor,
                                grpc::Status status) {
  if (gate_ != nullptr && !gate_->serving()) {
    absl::MutexLock lock(&mu_);
    if (shutdown_.ok() && gate_->leads()) {
      held_.emplace_back(reactor, std::move(status));
      return;
    }
    // A standby or a server going away: the op may or may not have been
    // applied, as for any call cut short.
    if (!shutdown_.ok()) status = ToGrpcStatus(shutdown_);
  }
  if (gate_ != nullptr && !gate_->leads() && status.ok()) {
    status = ToGrpcStatus(gate_->Check());
  }
  reactor->Finish(status);
}

void StoreService::ReleaseHeld() {
  if (gate_ == nullptr || !gate_->serving()) return;
  std::vector<std::pair<grpc::ServerUnaryReactor*, grpc::Status>> held;
  std::vector<std::shared_ptr<StreamCore>> streams;
  {
    absl::MutexLock lock(&mu_);
    held.swap(held_);
    for (const auto& [raw, stream] : streams_) streams.push_back(stream);
  }
  for (auto& [reactor, status] : held) reactor->Finish(status);
  for (const auto& stream : streams) stream->Kick();
}

absl::Status StoreService::CheckGate(
    grpc::CallbackServerContext* context) const {
  if (gate_ != nullptr && gate_->leads()) {
    context->AddInitialMetadata(kEpochMetadataKey,
                                absl::StrCat(gate_->epoch()));
  }
  if (gate_ == nullptr || gate_->serving()) return absl::OkStatus();
  absl::Status refusal = gate_->Check();
  if (const std::string leader = gate_->leader();
      !refusal.ok() && !leader.empty()) {
    context->AddTrailingMetadata(kLeaderMetadataKey, leader);
  }
  return refusal;
}

absl::Status StoreService::CheckNamespace(
    absl::Span<const std::string> authorization,
    const std::string& prefix) const {
  absl::Status valid = CheckPrefix(prefix);
  if (!valid.ok() || auth_ == nullptr) return valid;
  return auth_->CheckStore(authorization, prefix);
}

absl::Status StoreService::CheckAccess(grpc::CallbackServerContext* context,
                                       const std::string& prefix) const {
  if (absl::Status gate = CheckGate(context); !gate.ok()) return gate;
  absl::Status valid = CheckPrefix(prefix);
  if (!valid.ok() || auth_ == nullptr) return valid;
  return auth_->CheckStore(AuthorizationOf(*context), prefix);
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
  std::vector<std::pair<grpc::ServerUnaryReactor*, grpc::Status>> held;
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
    held.swap(held_);
  }
  for (auto& [reactor, ignored] : held) reactor->Finish(ToGrpcStatus(why));
  for (const auto& stream : streams) stream->End(why, "");
  scheduler_.Stop();
  for (KvStore::WaiterId id : pending) store_->CancelWait(id, why);
}

void StoreService::EndOpen(const absl::Status& why, const std::string& leader) {
  const absl::Status status =
      why.ok() ? absl::UnavailableError("this musterd stopped leading") : why;
  std::vector<KvStore::WaiterId> pending;
  std::vector<std::shared_ptr<StreamCore>> streams;
  std::vector<std::pair<grpc::ServerUnaryReactor*, grpc::Status>> held;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, named] : waits_) {
      named = leader;
      pending.push_back(id);
    }
    for (const auto& [raw, stream] : streams_) streams.push_back(stream);
    held.swap(held_);
  }
  // Answers held for a confirmation that will not come: the op may or may
  // not have been applied, as for any call cut short by a failover.
  for (auto& [reactor, ignored] : held) reactor->Finish(ToGrpcStatus(status));
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

}  // namespace muster::store
