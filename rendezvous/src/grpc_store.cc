#include "muster/rendezvous/grpc_store.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "muster/common/logging.h"
#include "muster/common/net.h"
#include "muster/v1/store.grpc.pb.h"
#include "rendezvous/src/grpc_security.h"
#include "rendezvous/src/grpc_status.h"
#include "rendezvous/src/leader_gate.h"

namespace muster::rendezvous {
namespace {

constexpr int kDefaultStorePort = 29400;
// Deadline of calls that do not wait: generous, only a hung server or a cut
// network reaches it.
constexpr absl::Duration kCallTimeout = absl::Seconds(30);
// Calls that wait get timeout + this as their gRPC deadline, so the server's
// DEADLINE_EXCEEDED (which names the keys) comes first.
constexpr absl::Duration kWaitMargin = absl::Seconds(5);

// timeout_ms for a request: 0 = do not wait; at least 1 ms for any positive
// timeout; int64 max for an infinite one.
int64_t TimeoutMs(absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) return 0;
  if (timeout == absl::InfiniteDuration())
    return std::numeric_limits<int64_t>::max();
  return std::max<int64_t>(
      1, absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1))));
}

// `wait` is how long the call may wait on the server (zero for calls that do
// not wait).
void Deadline(grpc::ClientContext* context, absl::Duration wait) {
  if (wait == absl::InfiniteDuration()) return;
  context->set_deadline(absl::ToChronoTime(
      absl::Now() + std::max(wait, absl::ZeroDuration()) +
      (wait > absl::ZeroDuration() ? kWaitMargin : kCallTimeout)));
}

// The stream and its failover. Why a supervisor thread: a broken stream is
// noticed in a gRPC reaction, which must not block, while opening the next one
// (backoff, an accept deadline, trying the replicas in turn) waits; one thread
// per store, idle unless a stream is being opened.
class GrpcStore final : public Store {
 public:
  GrpcStore(std::vector<HostPort> endpoints, std::string prefix,
            ClientSecurity security, absl::Duration failover_timeout,
            bool unary)
      : prefix_(std::move(prefix)),
        security_(std::move(security)),
        failover_timeout_(failover_timeout),
        unary_(unary),
        endpoints_(std::move(endpoints)) {
    absl::MutexLock lock(&link_->mu);
    link_->owner = this;
  }

  ~GrpcStore() override;

  // Channels to every endpoint; with the stream, the first stream accepted
  // (or UNIMPLEMENTED: the unary fallback) within `timeout`.
  absl::Status Connect(absl::Duration timeout);

  absl::Status Set(absl::string_view key, absl::string_view value) override {
    v1::StoreRequest r;
    v1::SetRequest* op = r.mutable_set();
    op->set_key(std::string(key));
    op->set_value(std::string(value));
    return Call(std::move(r), "Set", key, absl::ZeroDuration()).status();
  }

  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override {
    v1::StoreRequest r;
    v1::GetRequest* op = r.mutable_get();
    op->set_key(std::string(key));
    op->set_timeout_ms(TimeoutMs(timeout));
    absl::StatusOr<v1::StoreResponse> response =
        Call(std::move(r), "Get", key, timeout);
    if (!response.ok()) return response.status();
    return std::move(*response->mutable_get()->mutable_value());
  }

  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override {
    v1::StoreRequest r;
    v1::AddRequest* op = r.mutable_add();
    op->set_key(std::string(key));
    op->set_delta(delta);
    absl::StatusOr<v1::StoreResponse> response =
        Call(std::move(r), "Add", key, absl::ZeroDuration());
    if (!response.ok()) return response.status();
    return response->add().value();
  }

  absl::StatusOr<std::string> CompareSet(absl::string_view key,
                                         absl::string_view expected,
                                         absl::string_view desired) override {
    v1::StoreRequest r;
    v1::CompareSetRequest* op = r.mutable_compare_set();
    op->set_key(std::string(key));
    op->set_expected(std::string(expected));
    op->set_desired(std::string(desired));
    absl::StatusOr<v1::StoreResponse> response =
        Call(std::move(r), "CompareSet", key, absl::ZeroDuration());
    if (!response.ok()) return response.status();
    return std::move(*response->mutable_compare_set()->mutable_value());
  }

  absl::Status Wait(absl::Span<const std::string> keys,
                    absl::Duration timeout) override {
    v1::StoreRequest r;
    v1::WaitRequest* op = r.mutable_wait();
    for (const std::string& key : keys) op->add_keys(key);
    op->set_timeout_ms(TimeoutMs(timeout));
    return Call(std::move(r), "Wait", absl::StrJoin(keys, ", "), timeout)
        .status();
  }

  absl::StatusOr<std::vector<std::string>> MultiGet(
      absl::Span<const std::string> keys, absl::Duration timeout) override {
    v1::StoreRequest r;
    v1::MultiGetRequest* op = r.mutable_multi_get();
    for (const std::string& key : keys) op->add_keys(key);
    op->set_timeout_ms(TimeoutMs(timeout));
    absl::StatusOr<v1::StoreResponse> response =
        Call(std::move(r), "MultiGet", absl::StrJoin(keys, ", "), timeout);
    if (!response.ok()) return response.status();
    v1::MultiGetResponse* values = response->mutable_multi_get();
    if (values->values_size() != static_cast<int>(keys.size())) {
      return absl::InternalError(absl::StrCat(
          "MultiGet of ", keys.size(), " keys from ", CurrentEndpoint(),
          " returned ", values->values_size(), " values"));
    }
    return std::vector<std::string>(
        std::make_move_iterator(values->mutable_values()->begin()),
        std::make_move_iterator(values->mutable_values()->end()));
  }

  absl::Status MultiSet(absl::Span<const std::string> keys,
                        absl::Span<const std::string> values) override {
    if (keys.size() != values.size()) {
      return absl::InvalidArgumentError(absl::StrCat("MultiSet has ",
                                                     keys.size(), " keys but ",
                                                     values.size(), " values"));
    }
    v1::StoreRequest r;
    v1::MultiSetRequest* op = r.mutable_multi_set();
    for (const std::string& key : keys) op->add_keys(key);
    for (const std::string& value : values) op->add_values(value);
    return Call(std::move(r), "MultiSet", absl::StrJoin(keys, ", "),
                absl::ZeroDuration())
        .status();
  }

  absl::StatusOr<bool> Delete(absl::string_view key) override {
    v1::StoreRequest r;
    r.mutable_delete_()->set_key(std::string(key));
    absl::StatusOr<v1::StoreResponse> response =
        Call(std::move(r), "Delete", key, absl::ZeroDuration());
    if (!response.ok()) return response.status();
    return response->delete_().deleted();
  }

  absl::StatusOr<int64_t> NumKeys() override {
    v1::StoreRequest r;
    r.mutable_num_keys();
    absl::StatusOr<v1::StoreResponse> response =
        Call(std::move(r), "NumKeys", "", absl::ZeroDuration());
    if (!response.ok()) return response.status();
    return response->num_keys().count();
  }

 private:
  class Conn;
  // How a stream reaches its store: the store's destructor clears `owner`
  // (waiting for calls in progress) should a stream outlive its wait for the
  // streams to end, so a late reaction finds no store instead of a freed one.
  struct Link {
    absl::Mutex mu;
    GrpcStore* owner ABSL_GUARDED_BY(mu) = nullptr;
  };

  // One op from a caller, pending until answered or failed.
  struct Op {
    v1::StoreRequest request;
    bool is_add = false;
    // Waiting ops: when the wait ends (sent again with what is left of it).
    absl::Time wait_until = absl::InfiniteFuture();
    bool waits = false;
    bool written = false;  // (mu_) on the stream now serving it
    // (set before done) an older musterd: the caller sends it as a unary call
    bool retry_unary = false;
    absl::Notification done;
    absl::StatusOr<v1::StoreResponse> result;  // set before done
  };

  // Sends `r` (its op) and waits for its answer; `wait` is how long the op
  // may wait on the server (zero for ops that do not wait).
  absl::StatusOr<v1::StoreResponse> Call(v1::StoreRequest r,
                                         absl::string_view call,
                                         absl::string_view keys,
                                         absl::Duration wait);
  absl::StatusOr<v1::StoreResponse> CallUnary(const v1::StoreRequest& r,
                                              absl::string_view call,
                                              absl::string_view keys,
                                              absl::Duration wait);
  // The call's status as an absl::Status, naming the call and the endpoint.
  absl::Status Check(const grpc::Status& status, absl::string_view call,
                     absl::string_view keys, absl::Duration wait,
                     const std::string& endpoint) const;

  std::string CurrentEndpoint() const {
    absl::MutexLock lock(&mu_);
    return endpoints_[current_].ToString();
  }
  std::string EndpointList() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    std::vector<std::string> all;
    for (const HostPort& e : endpoints_) all.push_back(e.ToString());
    return absl::StrJoin(all, ",");
  }
  // The channel to endpoints_[i], made on first use.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> ChannelLocked(int i)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int IndexOfLocked(const std::string& endpoint)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Supervisor: opens a stream whenever one is needed.
  void Supervise();
  // Reactions of the current stream (Conn), under no lock of ours.
  void Accepted(Conn* conn);
  void Deliver(Conn* conn, v1::StoreResponses& responses);
  void WriteDone(Conn* conn, bool ok);
  void ReadsEnded(Conn* conn);
  void StreamDone(Conn* conn, const grpc::Status& status,
                  const std::string& leader);

  // Writes the queued ops when the stream is open and idle.
  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends an op (erasing it from pending_); the caller notifies it outside
  // the lock.
  std::shared_ptr<Op> TakeLocked(uint64_t id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Complete(const std::shared_ptr<Op>& op,
                       absl::StatusOr<v1::StoreResponse> result) {
    op->result = std::move(result);
    op->done.Notify();
  }
  // The stream failed (or could not be opened) and no replica answered for
  // failover_timeout: every pending op fails with `why`.
  void FailAllLocked(const absl::Status& why,
                     std::vector<std::shared_ptr<Op>>* failed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string prefix_;
  const ClientSecurity security_;
  const absl::Duration failover_timeout_;
  const bool unary_;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  // Grows when a standby names a leader not listed.
  std::vector<HostPort> endpoints_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<v1::Store::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
  int current_ ABSL_GUARDED_BY(mu_) = 0;
  // The unary fallback (an older musterd answered UNIMPLEMENTED).
  bool use_unary_ ABSL_GUARDED_BY(mu_) = false;
  Conn* conn_ ABSL_GUARDED_BY(mu_) = nullptr;    // the stream, while it lives
  bool conn_open_ ABSL_GUARDED_BY(mu_) = false;  // accepted, reads go on
  bool conn_reads_ended_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  int live_conns_ ABSL_GUARDED_BY(mu_) = 0;  // until their OnDone
  bool need_stream_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time next_attempt_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Since when no stream was open with ops to serve (InfiniteFuture: none).
  absl::Time failing_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  int failed_attempts_ ABSL_GUARDED_BY(mu_) = 0;  // in a row
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Op>> pending_
      ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> unsent_ ABSL_GUARDED_BY(mu_);
  std::thread supervisor_;
  const std::shared_ptr<Link> link_ = std::make_shared<Link>();
};

// One Store.Stream. Lives from StartCall until OnDone (deletes itself). A
// read is always in flight until the stream ends, so OnDone cannot come while
// GrpcStore still writes to it (it stops at ReadsEnded).
class GrpcStore::Conn final
    : public grpc::ClientBidiReactor<v1::StoreRequests, v1::StoreResponses> {
 public:
  Conn(GrpcStore* owner, int endpoint, v1::Store::Stub* stub)
      : link_(owner->link_), endpoint_(endpoint) {
    stub->async()->Stream(&context_, this);
    StartRead(&read_);
    StartCall();
  }
  int endpoint() const { return endpoint_; }
  bool accepted() const { return accepted_.load(); }
  void Cancel() { context_.TryCancel(); }
  v1::StoreRequests& write_buffer() { return write_; }

  void OnReadInitialMetadataDone(bool ok) override {
    if (!ok) return;
    const auto& md = context_.GetServerInitialMetadata();
    if (md.find("muster-store-stream") == md.end()) return;
    accepted_.store(true);
    if (auto owner = Owner()) owner->Accepted(this);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {
      if (auto owner = Owner()) owner->ReadsEnded(this);
      return;
    }
    if (auto owner = Owner()) owner->Deliver(this, read_);
    read_.Clear();
    StartRead(&read_);
  }
  void OnWriteDone(bool ok) override {
    if (auto owner = Owner()) owner->WriteDone(this, ok);
  }
  void OnDone(const grpc::Status& status) override {
    if (auto owner = Owner()) {
      owner->StreamDone(this, status, LeaderFromTrailers(context_));
    }
    delete this;
  }

 private:
  // The store while it lives, held (reader lock) for the call into it.
  struct Held {
    explicit Held(Link* link) : lock(&link->mu), owner(link->owner) {}
    GrpcStore* operator->() const { return owner; }
    explicit operator bool() const { return owner != nullptr; }
    absl::ReaderMutexLock lock;
    GrpcStore* owner;
  };
  Held Owner() { return Held(link_.get()); }

  const std::shared_ptr<Link> link_;
  const int endpoint_;
  grpc::ClientContext context_;
  v1::StoreRequests write_;
  v1::StoreResponses read_;
  std::atomic<bool> accepted_{false};
};

GrpcStore::~GrpcStore() {
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    if (conn_ != nullptr) conn_->Cancel();
    cv_.SignalAll();
  }
  if (supervisor_.joinable()) supervisor_.join();
  {
    absl::MutexLock lock(&mu_);
    auto gone = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return live_conns_ == 0;
    };
    // A cancelled stream ends within milliseconds; the deadline keeps a wedged
    // transport from hanging the process at exit.
    if (!mu_.AwaitWithTimeout(absl::Condition(&gone), absl::Seconds(10))) {
      MUSTER_LOG(WARNING) << "GrpcStore: a Store stream did not end within "
                             "10s of closing the store";
    }
  }
  // Waits for reactions still inside this store (the tail of a StreamDone).
  absl::MutexLock unlink(&link_->mu);
  link_->owner = nullptr;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> GrpcStore::ChannelLocked(int i) {
  if (channels_.size() < endpoints_.size()) {
    channels_.resize(endpoints_.size());
    stubs_.resize(endpoints_.size());
  }
  if (channels_[i] == nullptr) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        NewSecureMusterChannel(endpoints_[i], security_);
    if (!channel.ok()) return channel.status();
    channels_[i] = *std::move(channel);
    stubs_[i] = v1::Store::NewStub(channels_[i]);
  }
  return channels_[i];
}

int GrpcStore::IndexOfLocked(const std::string& endpoint) {
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    if (endpoints_[i].ToString() == endpoint) return static_cast<int>(i);
  }
  absl::StatusOr<HostPort> parsed = ParseHostPort(endpoint, kDefaultStorePort);
  if (!parsed.ok() || parsed->host.empty()) return -1;
  endpoints_.push_back(*parsed);
  return static_cast<int>(endpoints_.size()) - 1;
}

absl::Status GrpcStore::Connect(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<HostPort> endpoints;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < endpoints_.size(); ++i) {
      absl::StatusOr<std::shared_ptr<grpc::Channel>> c =
          ChannelLocked(static_cast<int>(i));
      if (!c.ok()) return c.status();
      channels.push_back(*c);
    }
    endpoints = endpoints_;
  }
  if (endpoints.size() == 1) {
    // One musterd: the patient wait that names the cause (refused, no answer,
    // TLS mismatch) when it cannot be reached.
    absl::Status connected =
        WaitForChannel(*channels[0], endpoints[0], "store", timeout,
                       ChannelWait::kPatient, security_.tls());
    if (!connected.ok()) return connected;
  } else {
    // Replicas: any of them will do; the stream finds the leader.
    bool any = false;
    while (!any && absl::Now() < deadline) {
      for (size_t i = 0; i < channels.size() && !any; ++i) {
        any = channels[i]->WaitForConnected(absl::ToChronoTime(
            std::min(deadline, absl::Now() + absl::Milliseconds(100))));
        if (any) {
          absl::MutexLock lock(&mu_);
          current_ = static_cast<int>(i);
        }
      }
    }
    if (!any) {
      std::vector<std::string> causes;
      for (size_t i = 0; i < channels.size(); ++i) {
        absl::Status s = WaitForChannel(
            *channels[i], endpoints[i], "store", absl::Milliseconds(1),
            ChannelWait::kFailFast, security_.tls());
        causes.push_back(std::string(s.message()));
      }
      return absl::UnavailableError(absl::StrCat(
          "cannot reach any store replica within ",
          absl::FormatDuration(timeout), ": ", absl::StrJoin(causes, "; ")));
    }
  }
  if (unary_) {
    absl::MutexLock lock(&mu_);
    use_unary_ = true;
    return absl::OkStatus();
  }
  supervisor_ = std::thread([this] { Supervise(); });
  absl::MutexLock lock(&mu_);
  need_stream_ = true;
  failing_since_ = absl::Now();
  cv_.SignalAll();
  // Not needed any more: the tries failed for good (one musterd refused, or
  // every replica for failover_timeout).
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return conn_open_ || use_unary_ || !need_stream_;
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&settled), deadline) ||
      (!conn_open_ && !use_unary_)) {
    return absl::UnavailableError(absl::StrCat(
        "no store replica of ", EndpointList(),
        " accepted a Store stream within ", absl::FormatDuration(timeout),
        last_error_.empty() ? "" : absl::StrCat(": ", last_error_)));
  }
  return absl::OkStatus();
}

void GrpcStore::Supervise() {
  absl::MutexLock lock(&mu_);
  while (!closing_) {
    if (!need_stream_ || conn_ != nullptr || use_unary_) {
      cv_.Wait(&mu_);
      continue;
    }
    if (absl::Now() < next_attempt_) {
      cv_.WaitWithDeadline(&mu_, next_attempt_);
      continue;
    }
    const int i = current_;
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = ChannelLocked(i);
    if (!channel.ok()) {  // TLS files gone since Connect: nothing to retry
      last_error_ = std::string(channel.status().message());
      std::vector<std::shared_ptr<Op>> failed;
      FailAllLocked(channel.status(), &failed);
      need_stream_ = false;
      mu_.Unlock();
      for (auto& op : failed) op->done.Notify();
      mu_.Lock();
      continue;
    }
    ++live_conns_;
    writing_ = false;
    conn_open_ = false;
    conn_reads_ended_ = false;
    conn_ = new Conn(this, i, stubs_[i].get());
    Conn* const opened = conn_;
    // A stream that is neither accepted nor refused in time (a silent host)
    // is cancelled, which counts as that replica failing.
    const absl::Time accept_by = absl::Now() + absl::Seconds(2);
    auto settled = [this, opened]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return closing_ || conn_ != opened || conn_open_;
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&settled), accept_by)) {
      opened->Cancel();
    }
  }
}

void GrpcStore::Accepted(Conn* conn) {
  absl::MutexLock lock(&mu_);
  if (conn != conn_ || conn_reads_ended_) return;
  conn_open_ = true;
  current_ = conn->endpoint();
  failing_since_ = absl::InfiniteFuture();
  failed_attempts_ = 0;
  cv_.SignalAll();
  MaybeWriteLocked();
}

void GrpcStore::MaybeWriteLocked() {
  if (conn_ == nullptr || !conn_open_ || writing_ || unsent_.empty()) return;
  // What the callers queued while the last write was in flight goes in one
  // message (at most 1,024 ops or about 1 MiB, under the server's bounds).
  constexpr int kMaxOps = 1024;
  constexpr size_t kMaxBytes = 1 << 20;
  v1::StoreRequests& out = conn_->write_buffer();
  out.Clear();
  size_t bytes = 0;
  const absl::Time now = absl::Now();
  std::vector<std::shared_ptr<Op>> expired;
  while (!unsent_.empty() && out.requests_size() < kMaxOps &&
         bytes < kMaxBytes) {
    const uint64_t id = unsent_.front();
    unsent_.pop_front();
    auto it = pending_.find(id);
    if (it == pending_.end()) continue;  // its caller gave up
    Op& op = *it->second;
    if (op.waits && op.wait_until != absl::InfiniteFuture()) {
      // Sent again after a failover: only what is left of the wait.
      const absl::Duration left = op.wait_until - now;
      if (left <= absl::ZeroDuration()) {
        expired.push_back(it->second);
        pending_.erase(it);
        continue;
      }
      const int64_t ms = TimeoutMs(left);
      switch (op.request.op_case()) {
        case v1::StoreRequest::kGet:
          op.request.mutable_get()->set_timeout_ms(ms);
          break;
        case v1::StoreRequest::kWait:
          op.request.mutable_wait()->set_timeout_ms(ms);
          break;
        case v1::StoreRequest::kMultiGet:
          op.request.mutable_multi_get()->set_timeout_ms(ms);
          break;
        default:
          break;
      }
    }
    op.written = true;
    bytes += op.request.ByteSizeLong();
    *out.add_requests() = op.request;
  }
  for (auto& op : expired) {
    op->result = absl::DeadlineExceededError(
        "the wait's time ran out while the store failed over to another "
        "replica");
    op->done.Notify();
  }
  if (out.requests_size() == 0) return;
  writing_ = true;
  conn_->StartWrite(&out);
}

void GrpcStore::WriteDone(Conn* conn, bool ok) {
  absl::MutexLock lock(&mu_);
  if (conn != conn_) return;
  writing_ = false;
  if (!ok) return;  // the stream is broken; StreamDone follows
  MaybeWriteLocked();
}

std::shared_ptr<GrpcStore::Op> GrpcStore::TakeLocked(uint64_t id) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return nullptr;
  std::shared_ptr<Op> op = std::move(it->second);
  pending_.erase(it);
  return op;
}

void GrpcStore::Deliver(Conn* /*conn*/, v1::StoreResponses& responses) {
  std::vector<std::pair<std::shared_ptr<Op>, v1::StoreResponse*>> done;
  {
    absl::MutexLock lock(&mu_);
    for (v1::StoreResponse& r : *responses.mutable_responses()) {
      std::shared_ptr<Op> op = TakeLocked(r.id());
      if (op != nullptr) done.emplace_back(std::move(op), &r);
    }
  }
  for (auto& [op, r] : done) {
    if (r->code() != 0) {
      Complete(op, absl::Status(static_cast<absl::StatusCode>(r->code()),
                                r->message()));
    } else {
      Complete(op, std::move(*r));
    }
  }
}

void GrpcStore::ReadsEnded(Conn* conn) {
  absl::MutexLock lock(&mu_);
  // No write may start on it from now on: OnDone may follow at any time.
  if (conn != conn_) return;
  conn_open_ = false;
  conn_reads_ended_ = true;
}

void GrpcStore::FailAllLocked(const absl::Status& why,
                              std::vector<std::shared_ptr<Op>>* failed) {
  for (auto& [id, op] : pending_) {
    op->result = why;
    failed->push_back(op);
  }
  pending_.clear();
  unsent_.clear();
}

void GrpcStore::StreamDone(Conn* conn, const grpc::Status& status,
                           const std::string& leader) {
  std::vector<std::shared_ptr<Op>> failed;
  {
    absl::MutexLock lock(&mu_);
    --live_conns_;
    cv_.SignalAll();
    if (conn != conn_) return;
    conn_ = nullptr;
    conn_open_ = false;
    writing_ = false;
    const std::string where = endpoints_[conn->endpoint()].ToString();
    if (closing_) {
      FailAllLocked(absl::CancelledError("the store is closing"), &failed);
    } else if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED &&
               !conn->accepted()) {
      // An older musterd: every op goes as a unary call from now on; those
      // queued are handed back to their callers (nothing was written).
      use_unary_ = true;
      FailAllLocked(absl::UnimplementedError("an older musterd"), &failed);
      for (auto& op : failed) op->retry_unary = true;
    } else {
      last_error_ = absl::StrCat(where, ": ", status.error_message());
      // Ops written on the stream that broke: repeat them on the next
      // stream, except an Add, which may have been applied already.
      std::vector<uint64_t> again;
      for (auto it = pending_.begin(); it != pending_.end();) {
        Op& op = *it->second;
        if (op.written && op.is_add) {
          op.result = absl::UnavailableError(absl::StrCat(
              "the Store stream to ", where, " broke (", status.error_message(),
              ") while this Add was in flight: the leader changed or failed, "
              "and the Add may or may not have been applied; read the key "
              "before adding again"));
          failed.push_back(std::move(it->second));
          pending_.erase(it++);
          continue;
        }
        if (op.written) {
          op.written = false;
          again.push_back(it->first);
        }
        ++it;
      }
      std::sort(again.begin(), again.end());
      unsent_.insert(unsent_.begin(), again.begin(), again.end());
      const absl::Time now = absl::Now();
      // One musterd and no leader named: nothing to fail over to. The ops in
      // flight fail at once, as unary calls did, and the next op opens a new
      // stream (a restarted musterd).
      const bool failover = endpoints_.size() > 1 || !leader.empty();
      if (failing_since_ == absl::InfiniteFuture()) failing_since_ = now;
      if (!leader.empty() && leader != where) {
        // A standby named the leader: straight there.
        const int i = IndexOfLocked(leader);
        current_ = i >= 0 ? i : (conn->endpoint() + 1) % endpoints_.size();
        next_attempt_ = now;
      } else {
        // Broken, unreachable, or no leader yet: the next replica, with a
        // backoff once every replica failed in a row.
        ++failed_attempts_;
        current_ = (conn->endpoint() + 1) % endpoints_.size();
        const int rounds =
            failed_attempts_ / static_cast<int>(endpoints_.size());
        next_attempt_ =
            now + (rounds == 0 ? absl::ZeroDuration()
                               : std::min(absl::Milliseconds(50) * rounds,
                                          absl::Milliseconds(500)));
      }
      if (!failover) {
        FailAllLocked(absl::UnavailableError(
                          absl::StrCat("the Store stream to ", where,
                                       " ended: ", status.error_message())),
                      &failed);
        need_stream_ = false;
        failing_since_ = absl::InfiniteFuture();
        failed_attempts_ = 0;
        next_attempt_ = absl::InfinitePast();
      } else if (now - failing_since_ >= failover_timeout_) {
        FailAllLocked(absl::UnavailableError(absl::StrCat(
                          "no store replica of ", EndpointList(),
                          " served within the failover timeout of ",
                          absl::FormatDuration(failover_timeout_),
                          " (last: ", last_error_, ")")),
                      &failed);
        // Idle until the next op starts another round of tries.
        need_stream_ = false;
        failing_since_ = absl::InfiniteFuture();
        failed_attempts_ = 0;
      } else {
        need_stream_ = true;
      }
      cv_.SignalAll();
    }
  }
  for (auto& op : failed) op->done.Notify();
}

absl::StatusOr<v1::StoreResponse> GrpcStore::Call(v1::StoreRequest r,
                                                  absl::string_view call,
                                                  absl::string_view keys,
                                                  absl::Duration wait) {
  r.set_prefix(prefix_);
  bool unary = false;
  {
    absl::MutexLock lock(&mu_);
    unary = use_unary_;
  }
  if (unary) return CallUnary(r, call, keys, wait);
  auto op = std::make_shared<Op>();
  op->is_add = r.op_case() == v1::StoreRequest::kAdd;
  op->waits = wait > absl::ZeroDuration();
  if (op->waits && wait != absl::InfiniteDuration()) {
    op->wait_until = absl::Now() + wait;
  }
  op->request = std::move(r);
  uint64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    unary = use_unary_;
    if (!unary) id = next_id_++;
  }
  if (unary) return CallUnary(op->request, call, keys, wait);
  {
    absl::MutexLock lock(&mu_);
    op->request.set_id(id);
    pending_.emplace(id, op);
    unsent_.push_back(id);
    if (conn_ == nullptr && !need_stream_) {
      // Idle after a failed failover: this op starts another round.
      need_stream_ = true;
      failing_since_ = absl::Now();
      next_attempt_ = absl::InfinitePast();
      cv_.SignalAll();
    }
    MaybeWriteLocked();
  }
  // The answer's deadline: the op's own time, the failover's, and a margin;
  // only a hung server or a cut network reaches it.
  const bool infinite = wait == absl::InfiniteDuration();
  const absl::Duration limit =
      std::max(wait, absl::ZeroDuration()) + failover_timeout_ +
      (wait > absl::ZeroDuration() ? kWaitMargin : kCallTimeout);
  if (infinite) {
    op->done.WaitForNotification();
  } else if (!op->done.WaitForNotificationWithTimeout(limit)) {
    absl::MutexLock lock(&mu_);
    if (TakeLocked(id) != nullptr) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the store at ", endpoints_[current_].ToString(), " did not answer ",
          keys.empty() ? std::string(call)
                       : absl::StrCat(call, " '", keys, "'"),
          " within ", absl::FormatDuration(limit)));
    }
  }
  op->done.WaitForNotification();  // answered meanwhile: set already
  if (op->retry_unary) return CallUnary(op->request, call, keys, wait);
  if (!op->result.ok()) {
    const absl::Status& s = op->result.status();
    if (s.code() == absl::StatusCode::kUnavailable) {
      const std::string what = keys.empty()
                                   ? std::string(call)
                                   : absl::StrCat(call, " '", keys, "'");
      return absl::UnavailableError(
          absl::StrCat(what, " on the store failed: ", s.message()));
    }
  }
  return std::move(op->result);
}

absl::StatusOr<v1::StoreResponse> GrpcStore::CallUnary(
    const v1::StoreRequest& r, absl::string_view call, absl::string_view keys,
    absl::Duration wait) {
  // A standby's refusal names the leader: follow it (a few times at most).
  for (int attempt = 0;; ++attempt) {
    std::shared_ptr<grpc::Channel> channel;
    std::string endpoint;
    {
      absl::MutexLock lock(&mu_);
      absl::StatusOr<std::shared_ptr<grpc::Channel>> c =
          ChannelLocked(current_);
      if (!c.ok()) return c.status();
      channel = *c;
      endpoint = endpoints_[current_].ToString();
    }
    std::unique_ptr<v1::Store::Stub> stub = v1::Store::NewStub(channel);
    grpc::ClientContext context;
    Deadline(&context, wait);
    v1::StoreResponse out;
    out.set_id(r.id());
    grpc::Status status;
    switch (r.op_case()) {
      case v1::StoreRequest::kSet: {
        v1::SetRequest q = r.set();
        q.set_prefix(r.prefix());
        status = stub->Set(&context, q, out.mutable_set());
        break;
      }
      case v1::StoreRequest::kGet: {
        v1::GetRequest q = r.get();
        q.set_prefix(r.prefix());
        status = stub->Get(&context, q, out.mutable_get());
        break;
      }
      case v1::StoreRequest::kAdd: {
        v1::AddRequest q = r.add();
        q.set_prefix(r.prefix());
        status = stub->Add(&context, q, out.mutable_add());
        break;
      }
      case v1::StoreRequest::kCompareSet: {
        v1::CompareSetRequest q = r.compare_set();
        q.set_prefix(r.prefix());
        status = stub->CompareSet(&context, q, out.mutable_compare_set());
        break;
      }
      case v1::StoreRequest::kWait: {
        v1::WaitRequest q = r.wait();
        q.set_prefix(r.prefix());
        status = stub->Wait(&context, q, out.mutable_wait());
        break;
      }
      case v1::StoreRequest::kMultiGet: {
        v1::MultiGetRequest q = r.multi_get();
        q.set_prefix(r.prefix());
        status = stub->MultiGet(&context, q, out.mutable_multi_get());
        break;
      }
      case v1::StoreRequest::kMultiSet: {
        v1::MultiSetRequest q = r.multi_set();
        q.set_prefix(r.prefix());
        status = stub->MultiSet(&context, q, out.mutable_multi_set());
        break;
      }
      case v1::StoreRequest::kDelete: {
        v1::DeleteRequest q = r.delete_();
        q.set_prefix(r.prefix());
        status = stub->Delete(&context, q, out.mutable_delete_());
        break;
      }
      case v1::StoreRequest::kNumKeys: {
        v1::NumKeysRequest q = r.num_keys();
        q.set_prefix(r.prefix());
        status = stub->NumKeys(&context, q, out.mutable_num_keys());
        break;
      }
      case v1::StoreRequest::OP_NOT_SET:
        return absl::InternalError("a Store op without an op");
    }
    if (status.ok()) return out;
    const std::string leader = LeaderFromTrailers(context);
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
        !leader.empty() && attempt < 3) {
      absl::MutexLock lock(&mu_);
      const int i = IndexOfLocked(leader);
      if (i >= 0) {
        current_ = i;
        continue;
      }
    }
    return Check(status, call, keys, wait, endpoint);
  }
}

absl::Status GrpcStore::Check(const grpc::Status& status,
                              absl::string_view call, absl::string_view keys,
                              absl::Duration wait,
                              const std::string& endpoint) const {
  if (status.ok()) return absl::OkStatus();
  absl::Status s = FromGrpcStatus(status);
  const std::string what =
      keys.empty() ? std::string(call) : absl::StrCat(call, " '", keys, "'");
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      return absl::UnavailableError(
          absl::StrCat(what, " on the store at ", endpoint,
                       " failed: ", status.error_message()));
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      if (status.error_message() ==
          "Deadline Exceeded") {  // gRPC's own, not the server's
        return absl::DeadlineExceededError(absl::StrCat(
            "the store at ", endpoint, " did not answer ", what, " within ",
            absl::FormatDuration(
                std::max(wait, absl::ZeroDuration()) +
                (wait > absl::ZeroDuration() ? kWaitMargin : kCallTimeout))));
      }
      return s;
    default:
      return s;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> NewGrpcStore(
    const GrpcStoreOptions& options) {
  if (options.endpoint.empty()) {
    return absl::InvalidArgumentError(
        "the store endpoint is empty: set MUSTER_STORE_ENDPOINT (HOST:PORT of "
        "musterd, or H1:P1,H2:P2 of its replicas)");
  }
  if (options.prefix.empty()) {
    return absl::InvalidArgumentError(
        "the store prefix is empty: set MUSTER_STORE_PREFIX (the round's "
        "store_prefix)");
  }
  if (options.failover_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "failover_timeout is ", absl::FormatDuration(options.failover_timeout),
        ": it must be positive"));
  }
  std::vector<HostPort> endpoints;
  for (absl::string_view part : absl::StrSplit(options.endpoint, ',')) {
    part = absl::StripAsciiWhitespace(part);
    absl::StatusOr<HostPort> target = ParseHostPort(part, kDefaultStorePort);
    if (part.empty() || !target.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad store endpoint '", options.endpoint,
          "': expected HOST:PORT or a comma-separated list H1:P1,H2:P2 of "
          "musterd replicas",
          target.ok() ? std::string(" (an empty entry)")
                      : absl::StrCat(" (", target.status().message(), ")")));
    }
    if (target->host.empty()) target->host = "127.0.0.1";
    endpoints.push_back(*std::move(target));
  }
  auto store = std::make_unique<GrpcStore>(
      std::move(endpoints), options.prefix, options.security,
      options.failover_timeout, options.unary);
  absl::Status connected = store->Connect(options.connect_timeout);
  if (!connected.ok()) return connected;
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace muster::rendezvous
