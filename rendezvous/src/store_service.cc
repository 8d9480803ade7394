#include "rendezvous/src/store_service.h"

#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "muster/common/logging.h"
#include "rendezvous/src/grpc_security.h"
#include "rendezvous/src/grpc_status.h"

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

  WaitReactor(StoreService* service, Fill fill)
      : service_(service), fill_(std::move(fill)) {}

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
    if (id != 0) service_->Untrack(id);
    if (timer != 0) service_->scheduler_.Cancel(timer);
    if (result.ok()) {
      fill_(*std::move(result));
      Finish(grpc::Status::OK);
    } else {
      Finish(ToGrpcStatus(result.status()));
    }
  }

  StoreService* const service_;
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
    if (check.ok()) {
      check =
          s_->store_->Set(request->prefix(), request->key(), request->value());
    }
    return FinishNow(context, check);
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
    absl::StatusOr<int64_t> value =
        s_->store_->Add(request->prefix(), request->key(), request->delta());
    if (value.ok()) response->set_value(*value);
    return FinishNow(context, value.status());
  }

  grpc::ServerUnaryReactor* CompareSet(
      grpc::CallbackServerContext* context,
      const v1::CompareSetRequest* request,
      v1::CompareSetResponse* response) override {
    absl::Status check =
        s_->CheckAccessAndKey(context, request->prefix(), request->key());
    if (check.ok()) {
      absl::StatusOr<std::string> value =
          s_->store_->CompareSet(request->prefix(), request->key(),
                                 request->expected(), request->desired());
      if (value.ok()) {
        response->set_value(*std::move(value));
      } else {
        check = value.status();
      }
    }
    return FinishNow(context, check);
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
    return FinishNow(context, s_->store_->MultiSet(
                                  request->prefix(), ToVector(request->keys()),
                                  ToVector(request->values())));
  }

  grpc::ServerUnaryReactor* Delete(grpc::CallbackServerContext* context,
                                   const v1::DeleteRequest* request,
                                   v1::DeleteResponse* response) override {
    absl::Status check =
        s_->CheckAccessAndKey(context, request->prefix(), request->key());
    if (check.ok()) {
      response->set_deleted(
          s_->store_->Delete(request->prefix(), request->key()));
    }
    return FinishNow(context, check);
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

StoreService::StoreService(KvStore* store, const JobAuthRegistry* auth)
    : store_(store), auth_(auth), rpcs_(std::make_unique<Rpcs>(this)) {}

grpc::Service* StoreService::service() { return rpcs_.get(); }

absl::Status StoreService::CheckAccess(grpc::CallbackServerContext* context,
                                       const std::string& prefix) const {
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
  auto* reactor = new WaitReactor(this, std::move(fill));
  reactor->Start(prefix, std::move(keys), absl::Milliseconds(timeout_ms), what);
  return reactor;
}

StoreService::~StoreService() {
  Shutdown(absl::UnavailableError("the store is shutting down"));
}

void StoreService::Shutdown(const absl::Status& status) {
  std::vector<KvStore::WaiterId> pending;
  {
    absl::MutexLock lock(&mu_);
    if (!shutdown_.ok()) return;
    shutdown_ = status.ok()
                    ? absl::UnavailableError("the store is shutting down")
                    : status;
    pending.assign(waits_.begin(), waits_.end());
  }
  scheduler_.Stop();
  for (KvStore::WaiterId id : pending) store_->CancelWait(id, status);
}

int64_t StoreService::PendingWaits() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(waits_.size());
}

bool StoreService::Track(KvStore::WaiterId id, absl::Status* refusal) {
  absl::MutexLock lock(&mu_);
  if (!shutdown_.ok()) {
    *refusal = shutdown_;
    return false;
  }
  waits_.insert(id);
  return true;
}

void StoreService::Untrack(KvStore::WaiterId id) {
  absl::MutexLock lock(&mu_);
  waits_.erase(id);
}

absl::Status StoreService::ShutdownStatus() const {
  absl::MutexLock lock(&mu_);
  return shutdown_;
}

}  // namespace muster::rendezvous
