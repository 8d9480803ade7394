// The Store gRPC service over a KvStore, on the callback API. Calls that wait
// (Get, Wait and MultiGet with timeout_ms > 0) hold no thread while waiting:
// they park a KvStore waiter and end when the keys are set, at their deadline
// (DEADLINE_EXCEEDED naming the keys), when the client cancels, when the
// namespace is dropped (ABORTED), or at shutdown (UNAVAILABLE).
#ifndef MUSTER_RENDEZVOUS_SRC_STORE_SERVICE_H_
#define MUSTER_RENDEZVOUS_SRC_STORE_SERVICE_H_

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
#include "muster/rendezvous/auth.h"
#include "muster/rendezvous/kv_store.h"
#include "muster/v1/store.grpc.pb.h"

namespace muster::rendezvous {

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
  // auth, when given, decides every call by its namespace's job and the
  // caller's authorization metadata (auth.h); it must outlive the service.
  explicit StoreService(KvStore* store, const JobAuthRegistry* auth = nullptr);
  // Shutdown(UNAVAILABLE) when not done yet.
  ~StoreService();
  StoreService(const StoreService&) = delete;
  StoreService& operator=(const StoreService&) = delete;

  // The gRPC service to register with a grpc::ServerBuilder; owned by this.
  grpc::Service* service();

  // Ends every pending wait with `status`, makes later waits fail with it at
  // once, and stops the timer thread. Idempotent; does not wait for RPCs.
  void Shutdown(const absl::Status& status);

  // Waiting calls in progress.
  int64_t PendingWaits() const;

 private:
  class Rpcs;
  class WaitReactor;

  // Records a parked wait for Shutdown. False (not recorded) after Shutdown,
  // with its status.
  bool Track(KvStore::WaiterId id, absl::Status* refusal);
  void Untrack(KvStore::WaiterId id);
  absl::Status ShutdownStatus() const;
  // The namespace is well-formed and the caller may use it.
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

  KvStore* const store_;
  const JobAuthRegistry* const auth_;
  DeadlineScheduler scheduler_;

  mutable absl::Mutex mu_;
  absl::flat_hash_set<KvStore::WaiterId> waits_ ABSL_GUARDED_BY(mu_);
  absl::Status shutdown_ ABSL_GUARDED_BY(mu_);  // non-OK after Shutdown

  // Last: its handlers use everything above.
  const std::unique_ptr<Rpcs> rpcs_;
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_STORE_SERVICE_H_
