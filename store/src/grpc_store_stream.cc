#include "store/src/grpc_store_stream.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "muster/common/logging.h"
#include "muster/store/grpc_status.h"
#include "muster/store/service_hooks.h"
#include "muster/v1/store.grpc.pb.h"
#include "store/src/store_ops.h"

namespace muster::store::internal {

// One Store.Stream. Lives from StartCall until OnDone (deletes itself). A
// read is always in flight until the stream ends, so OnDone cannot come while
// GrpcStore still writes to it (it stops at ReadsEnded).
class GrpcStore::Conn final
    : public grpc::ClientBidiReactor<v1::StoreRequests, v1::StoreResponses> {
 public:
  Conn(GrpcStore* owner, int endpoint, v1::Store::Stub* stub)
      : link_(owner->link_), endpoint_(endpoint) {
    {
      absl::MutexLock lock(&link_->conns_mu);
      ++link_->conns;
    }
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
    int64_t epoch = 0;
    if (auto e = md.find(kEpochMetadataKey); e != md.end()) {
      (void)absl::SimpleAtoi(
          absl::string_view(e->second.data(), e->second.size()), &epoch);
    }
    accepted_.store(true);
    if (auto owner = Owner()) owner->Accepted(this, epoch);
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
    // The store's destructor waits for this count, not only for StreamDone:
    // the call's own teardown (~ClientContext) must be over before the store
    // releases the channel and gRPC may shut down.
    const std::shared_ptr<Link> link = link_;
    delete this;
    absl::MutexLock lock(&link->conns_mu);
    --link->conns;
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
  {
    absl::MutexLock unlink(&link_->mu);
    link_->owner = nullptr;
  }
  absl::MutexLock lock(&link_->conns_mu);
  auto deleted = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(link_->conns_mu) {
    return link_->conns == 0;
  };
  link_->conns_mu.AwaitWithTimeout(absl::Condition(&deleted),
                                   absl::Seconds(10));
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

void GrpcStore::Accepted(Conn* conn, int64_t epoch) {
  absl::MutexLock lock(&mu_);
  if (conn != conn_ || conn_reads_ended_) return;
  if (epoch < newest_epoch_) {
    // Fencing: a replica deposed since, still serving from a paused past.
    // Nothing is written to it; the cancel ends the stream and the ops go
    // to the next replica (StreamDone).
    last_error_ = absl::StrCat(
        endpoints_[conn->endpoint()].ToString(), ": leadership epoch ", epoch,
        " is older than epoch ", newest_epoch_,
        " seen before (a deposed leader); trying the others");
    MUSTER_LOG(WARNING) << "Store: ignoring musterd " << last_error_;
    conn->Cancel();
    return;
  }
  newest_epoch_ = epoch;
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
      // Ops written on the stream that broke: reads are repeated on the
      // next stream; a write may have been applied already, and applying it
      // a second time would not be one op taking effect once (an Add counts
      // twice, a Delete answers "absent", a Set lands after a later writer's
      // value): it fails, its outcome unknown, unless the caller asked for
      // its Sets to be repeated (one writer per key: the comm library's
      // bootstrap keys).
      std::vector<uint64_t> again;
      for (auto it = pending_.begin(); it != pending_.end();) {
        Op& op = *it->second;
        if (op.written && !op.repeatable) {
          op.result = absl::UnavailableError(absl::StrCat(
              "the Store stream to ", where, " broke (", status.error_message(),
              ") while this ", StoreOpName(op.request),
              " was in flight: the leader changed or failed, and it may or may "
              "not have been applied; read the key before writing again"));
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
  switch (r.op_case()) {
    case v1::StoreRequest::kAdd:
    case v1::StoreRequest::kCompareSet:
    case v1::StoreRequest::kDelete:
      op->repeatable = false;
      break;
    case v1::StoreRequest::kSet:
    case v1::StoreRequest::kMultiSet:
      op->repeatable = repeat_sets_in_flight_;
      break;
    default:
      op->repeatable = true;  // reads
      break;
  }
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

}  // namespace muster::store::internal
