// The Store gRPC service over a KvStore, on the callback API. Calls that wait
// (Get, Wait and MultiGet with timeout_ms > 0) hold no thread while waiting:
// they park a KvStore waiter and end when the keys are set, at their deadline
// (DEADLINE_EXCEEDED naming the keys), when the client cancels, when the
// namespace is dropped (ABORTED), or at shutdown (UNAVAILABLE).
//
// Besides the unary calls, Stream carries every op on one bidirectional stream
// (store.proto): one ServerBidiReactor per stream, no thread of its own, ops
// answered as they complete (out of order), answers batched into one message
// per write. Writes go through KvStore's async write path everywhere, so that
// a replicated musterd answers them once etcd committed them.
#ifndef MUSTER_STORE_STORE_SERVICE_H_
#define MUSTER_STORE_STORE_SERVICE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "muster/store/kv_store.h"
#include "muster/store/service_hooks.h"
#include "muster/v1/store.grpc.pb.h"

namespace muster::store {

// Bounds of one Store stream, so that a client that floods it (or never reads
// its answers) cannot exhaust musterd's memory.
struct StoreStreamLimits {
  // Ops accepted and not yet answered (mostly parked waits). An op past it
  // fails at once with RESOURCE_EXHAUSTED naming the limit. A worker's
  // GrpcStore has one op in flight per calling thread; a benchmark of 1,000
  // clients on a few streams a few hundred per stream.
  int64_t max_in_flight = 10'000;
  // Requests in one StoreRequests message; past it the stream ends with
  // RESOURCE_EXHAUSTED (GrpcStore sends at most 1,024).
  int max_batch = 4'096;
  // Bytes of answers waiting to be written (a client that stops reading).
  // Reading the stream pauses at half of it (HTTP/2 flow control then holds
  // the client back); an answer that would pass it becomes RESOURCE_EXHAUSTED
  // naming the limit instead (a batch of large Gets, waits ending at once).
  int64_t max_queued_bytes = int64_t{64} << 20;
};

// Runs callbacks at deadlines on one timer thread: an ordered map of (deadline,
// id) as the min-heap, a mutex and a condition variable.
//
// Why a thread of our own rather than grpc::Alarm: every waiting Store call
// needs exactly one cancellable deadline; one thread serves any number of them
// at O(log n) per Schedule/Cancel, its callbacks (KvStore::CancelWait) never
// block, it is stopped deterministically before the KvStore it points into is
// destroyed, and it can be unit-tested without a server. An Alarm per call
// would tie each deadline's lifetime to gRPC's callback executor instead.
//
// Thread-safe.
class DeadlineScheduler {
 public:
  using TimerId = uint64_t;

  // Starts the timer thread.
  DeadlineScheduler();
  // Stop().
  ~DeadlineScheduler();
  DeadlineScheduler(const DeadlineScheduler&) = delete;
  DeadlineScheduler& operator=(const DeadlineScheduler&) = delete;

  // Runs fn on the timer thread at `when` (at once when it has passed). Returns
  // an id for Cancel, never 0; returns 0 and drops fn after Stop. Does not
  // block. fn must not call Stop.
  TimerId Schedule(absl::Time when, absl::AnyInvocable<void()> fn);
  // Forgets a timer that has not run. No effect when it ran, is running, or was
  // cancelled. Does not wait for a running callback.
  void Cancel(TimerId id);
  // Drops pending timers without running them and joins the thread. Idempotent;
  // waits for a running callback to return.
  void Stop();
  // Timers not yet run.
  int64_t Pending() const;

 private:
  void Loop();

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::map<std::pair<absl::Time, TimerId>, absl::AnyInvocable<void()>> timers_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<TimerId, absl::Time> deadlines_ ABSL_GUARDED_BY(mu_);
  TimerId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::once_flag join_once_;
  std::thread thread_;
};

// The Store service: the waits in progress, their timer, and the access checks
// over a KvStore; its gRPC handlers (v1.Store on the callback API) are private
// to the .cc, thin, and reached through service(). Thread-safe. The store must
// outlive the service; the service must outlive the grpc::Server it is
// registered with.
class StoreService {
 public:
  // auth, when given, decides every call by its namespace and the caller's
  // authorization metadata (musterd: its job tokens); it must outlive the
  // service. None: every caller may use every namespace.
  explicit StoreService(KvStore* store, const StoreAccess* auth = nullptr,
                        StoreStreamLimits stream_limits = {});
  // Stream ops are counted there (muster_store_ops_total) and each stream's
  // end observed; set before the server starts. The unary calls are the
  // interceptor's.
  void SetMetrics(StoreMetrics* metrics) { metrics_ = metrics; }
  // Shutdown(UNAVAILABLE) when not done yet.
  ~StoreService();
  StoreService(const StoreService&) = delete;
  StoreService& operator=(const StoreService&) = delete;

  // The gRPC service to register with a grpc::ServerBuilder; owned by this.
  grpc::Service* service();

  // Replicas: while `gate` does not serve, every unary call, every stream at
  // its opening and at each of its ops is refused with the gate's UNAVAILABLE
  // and the leader in the trailing metadata `muster-leader`. Call before the
  // server starts; gate must outlive the service. None: always serve.
  void SetGate(const StoreGate* gate) { gate_ = gate; }

  // This musterd stopped leading: ends every open stream and every pending
  // unary wait with `why`, naming `leader` (HOST:PORT; empty: unknown) in the
  // trailing metadata `muster-leader`. Unlike Shutdown the service goes on
  // accepting calls (which the gate refuses while this replica stands by, and
  // serves again once it leads). Does not block on RPCs.
  void EndOpen(const absl::Status& why, const std::string& leader);

  // The leadership is confirmed (again): the answers held while it was not
  // leave now (unary calls and streams). From the server's tick thread.
  void ReleaseHeld();

  // Ends every pending wait and every open stream with `status`, makes later
  // waits and streams fail with it at once, and stops the timer thread.
  // Idempotent; does not wait for RPCs.
  void Shutdown(const absl::Status& status);

  // Waiting calls in progress (unary calls; a stream's waits are its own).
  int64_t PendingWaits() const;
  // Store streams open now.
  int64_t OpenStreams() const;

 private:
  class Rpcs;
  class WaitReactor;
  class StreamCore;
  class StreamReactor;

  // Records a parked wait for Shutdown and EndOpen. False (not recorded) after
  // Shutdown, with its status.
  bool Track(KvStore::WaiterId id, absl::Status* refusal);
  // Forgets it; returns the leader EndOpen named for it (empty: none), for
  // the call's trailing metadata.
  std::string Untrack(KvStore::WaiterId id);
  absl::Status ShutdownStatus() const;
  // OK while this musterd serves (no gate, or the gate serves); otherwise the
  // gate's UNAVAILABLE, and the leader goes into the call's trailing metadata.
  absl::Status CheckGate(grpc::CallbackServerContext* context) const;
  // A unary call's answer: now, or (the leadership unconfirmed: output
  // fencing) when ReleaseHeld runs, or UNAVAILABLE from EndOpen when this
  // replica no longer leads.
  void FinishFenced(grpc::ServerUnaryReactor* reactor, grpc::Status status);
  // The namespace is well-formed and a caller that sent `authorization`
  // may use it.
  absl::Status CheckNamespace(absl::Span<const std::string> authorization,
                              const std::string& prefix) const;
  // The gate, then the namespace is well-formed and the caller may use it.
  absl::Status CheckAccess(grpc::CallbackServerContext* context,
                           const std::string& prefix) const;
  // CheckAccess, then the one key of a single-key call is well-formed.
  absl::Status CheckAccessAndKey(grpc::CallbackServerContext* context,
                                 const std::string& prefix,
                                 const std::string& key) const;
  // The keys of `keys` not set in the namespace now (the store's Get, no
  // waiting); the values of those that are go to *values when it is given.
  std::vector<std::string> GetNow(
      const std::string& prefix,
      const google::protobuf::RepeatedPtrField<std::string>& keys,
      google::protobuf::RepeatedPtrField<std::string>* values) const;
  // Get, Wait and MultiGet: the checks (access, keys_valid, the timeout),
  // then with timeout 0 the status `now` returns (it fills the response), at
  // once; else UNAVAILABLE after Shutdown, or a WaitReactor that waits for
  // `keys` and calls fill with their values. `what` names the call in the
  // deadline message.
  grpc::ServerUnaryReactor* ServeRead(
      grpc::CallbackServerContext* context, const std::string& prefix,
      absl::Status keys_valid, int64_t timeout_ms,
      absl::FunctionRef<absl::Status()> now, std::vector<std::string> keys,
      absl::string_view what,
      absl::AnyInvocable<void(std::vector<std::string> values)> fill);

  // Streams: registered at open (false, with the refusal, after Shutdown),
  // forgotten at OnDone.
  bool Register(const std::shared_ptr<StreamCore>& stream,
                absl::Status* refusal);
  void Unregister(StreamCore* stream);

  KvStore* const store_;
  const StoreAccess* const auth_;
  StoreMetrics* metrics_ = nullptr;  // SetMetrics, before serving
  const StoreStreamLimits stream_limits_;
  const StoreGate* gate_ = nullptr;  // set before serving
  DeadlineScheduler scheduler_;

  mutable absl::Mutex mu_;
  // Parked unary waits, each with the leader EndOpen named for it.
  absl::flat_hash_map<KvStore::WaiterId, std::string> waits_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<StreamCore*, std::shared_ptr<StreamCore>> streams_
      ABSL_GUARDED_BY(mu_);
  absl::Status shutdown_ ABSL_GUARDED_BY(mu_);  // non-OK after Shutdown
  // Unary answers held by FinishFenced.
  std::vector<std::pair<grpc::ServerUnaryReactor*, grpc::Status>> held_
      ABSL_GUARDED_BY(mu_);

  // Last: its handlers use everything above.
  const std::unique_ptr<Rpcs> rpcs_;
};

}  // namespace muster::store

#endif  // MUSTER_STORE_STORE_SERVICE_H_
