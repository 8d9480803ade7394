// The Store service's Stream (store_service.h): the state of one bidi Store
// stream (StreamCore) and its gRPC reactor (StreamReactor), and the request
// checks the stream shares with the unary handlers. Private to the service:
// store_service.cc opens and ends streams, store_stream_service.cc runs them.
#ifndef MUSTER_STORE_SRC_STORE_STREAM_SERVICE_H_
#define MUSTER_STORE_SRC_STORE_STREAM_SERVICE_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "muster/store/grpc_security.h"
#include "muster/store/kv_store.h"
#include "muster/store/store_service.h"
#include "muster/v1/store.grpc.pb.h"

namespace muster::store {

// The checks of a Store request, the same on the unary calls and the stream.
absl::Status CheckKey(const std::string& key);
absl::Status CheckKeys(
    const google::protobuf::RepeatedPtrField<std::string>& keys);
absl::Status CheckTimeout(int64_t timeout_ms);
// The first error among checks.
absl::Status FirstError(std::initializer_list<absl::Status> checks);

std::vector<std::string> ToVector(
    const google::protobuf::RepeatedPtrField<std::string>& field);

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
  void ObserveEnd(grpc::StatusCode code);
  const absl::Time started_ = absl::Now();

  StreamCore(StoreService* service, grpc::CallbackServerContext* context)
      : s_(service),
        limits_(service->stream_limits_),
        context_(context),
        authorization_(AuthorizationOf(*context)) {}

  // Called once from the method handler with the new reactor: refuses the
  // stream (standby, shutdown) or accepts it and starts reading.
  void Open(StreamReactor* reactor);

  void OnReadDone(bool ok);
  void OnWriteDone(bool ok);
  // Starts the write of what waits, if any (answers held while the
  // leadership was unconfirmed).
  void Kick();
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
  // Admits an op: false (answered, or the stream ends) when this replica does
  // not serve, too many ops are in flight, or the credential may not use its
  // namespace; else counts it in flight and sets *prefix to its namespace.
  bool Admit(const v1::StoreRequest& request, std::string* prefix);
  // The op, dispatched (answered now or later); an error is its answer.
  absl::Status DispatchWrite(const std::string& prefix,
                             v1::StoreRequest& request);
  absl::Status DispatchRead(const std::string& prefix,
                            v1::StoreRequest& request);
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
  grpc::CallbackServerContext* const context_;    // used before Finish only
  const std::vector<std::string> authorization_;  // the caller's metadata
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

}  // namespace muster::store

#endif  // MUSTER_STORE_SRC_STORE_STREAM_SERVICE_H_
