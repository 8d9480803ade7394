// GrpcStore (muster/store/grpc_store.h): the Store client over
// musterd's Store.Stream, with failover between replicas and the unary
// fallback. Private to its two files: grpc_store.cc has the channels, Connect,
// the unary calls and NewGrpcStore; grpc_store_stream.cc the stream transport
// and its failover (the Conn reactor, the supervisor, the stream's ops).
#ifndef MUSTER_STORE_SRC_GRPC_STORE_STREAM_H_
#define MUSTER_STORE_SRC_GRPC_STORE_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "muster/common/net.h"
#include "muster/store/security.h"
#include "muster/store/store.h"
#include "muster/v1/store.grpc.pb.h"

namespace muster::store::internal {

// Deadline of calls that do not wait: generous, only a hung server or a cut
// network reaches it.
inline constexpr absl::Duration kCallTimeout = absl::Seconds(30);
// Calls that wait get timeout + this as their gRPC deadline, so the server's
// DEADLINE_EXCEEDED (which names the keys) comes first.
inline constexpr absl::Duration kWaitMargin = absl::Seconds(5);

// timeout_ms for a request: 0 = do not wait; at least 1 ms for any positive
// timeout; int64 max for an infinite one.
int64_t TimeoutMs(absl::Duration timeout);

// The stream and its failover. Why a supervisor thread: a broken stream is
// noticed in a gRPC reaction, which must not block, while opening the next one
// (backoff, an accept deadline, trying the replicas in turn) waits; one thread
// per store, idle unless a stream is being opened.
class GrpcStore final : public Store {
 public:
  GrpcStore(std::vector<HostPort> endpoints, std::string prefix,
            ClientSecurity security, absl::Duration failover_timeout,
            bool unary, bool repeat_sets_in_flight)
      : prefix_(std::move(prefix)),
        security_(std::move(security)),
        failover_timeout_(failover_timeout),
        unary_(unary),
        repeat_sets_in_flight_(repeat_sets_in_flight),
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
    // Streams not yet deleted (their ClientContext included). A leaf lock:
    // nothing else is taken while it is held.
    absl::Mutex conns_mu;
    int conns ABSL_GUARDED_BY(conns_mu) = 0;
  };

  // One op from a caller, pending until answered or failed.
  struct Op {
    v1::StoreRequest request;
    // Whether the op may be sent again after the stream it was written on
    // broke: reads always; a Set or MultiSet with repeat_sets_in_flight; a
    // write whose outcome could differ the second time (Add, CompareSet,
    // Delete) never.
    bool repeatable = true;
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
  // The stream reached a serving musterd of leadership `epoch` (0: a single
  // musterd). A stream of an epoch older than one seen before is a deposed
  // leader's: it is cancelled instead, and its ops go elsewhere.
  void Accepted(Conn* conn, int64_t epoch);
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
  const bool repeat_sets_in_flight_;  // GrpcStoreOptions

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
  // The newest leadership epoch a stream was accepted from (fencing).
  int64_t newest_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Op>> pending_
      ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> unsent_ ABSL_GUARDED_BY(mu_);
  std::thread supervisor_;
  const std::shared_ptr<Link> link_ = std::make_shared<Link>();
};

}  // namespace muster::store::internal

#endif  // MUSTER_STORE_SRC_GRPC_STORE_STREAM_H_
