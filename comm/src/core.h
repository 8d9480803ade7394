// CommCore: what every communicator does whatever its backend — ordering of
// operations (blocking and asynchronous), timeouts, the failure state, the
// peer monitor's verdicts, progress, subgroups and shutdown. Backends
// (comm/src/backend.h) only move bytes. The core names no backend: which ones
// a communicator runs on is decided above it (comm/select/), and handed to
// Connect as a BackendsConnector.
//
// Execution model:
//   * Collectives run one at a time in issue order. A blocking call runs on
//     the caller's thread once every earlier asynchronous collective has run
//     (no thread hop on the common path); asynchronous ones run on one
//     executor thread, started on first use.
//   * Send/Recv are posted on the caller's thread at once; a blocking one then
//     waits there, an asynchronous one is waited for by a completion thread
//     (started on first use) in posting order.
//   * The first failure of any operation (other than INVALID_ARGUMENT) breaks
//     the communicator: the backend is aborted, the peers are told, and every
//     later operation returns ABORTED with that first error.
#ifndef MUSTER_COMM_SRC_CORE_H_
#define MUSTER_COMM_SRC_CORE_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "comm/src/backend.h"
#include "comm/src/control_channel.h"
#include "comm/src/peer_monitor.h"
#include "comm/src/progress_file.h"
#include "muster/comm/communicator.h"
#include "muster/store/store.h"

namespace muster::comm::internal {

// The shared state behind a Work handle.
class WorkState {
 public:
  void Finish(absl::Status status);
  absl::Status Wait(absl::Duration timeout);
  bool Done() const;

 private:
  mutable absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// Everything the factories resolved (api/init.cc): options after the
// environment, and where Gloo binds.
struct CoreConfig {
  int rank = 0;
  int world_size = 1;
  std::shared_ptr<store::Store> store;
  // This communicator's namespace in the store ("muster_comm/3/").
  std::string key_prefix;
  CommOptions options;  // timeout, backend and algorithm resolved.
  // Where Gloo (and the peer monitor) bind: an interface name or an address,
  // and the IP address it comes to.
  std::string iface;
  std::string hostname;
  std::string bind_ip;
  std::string bind_reason;
  bool all_local = false;
  // Tests only: no peer monitor (to see what the backend alone reports).
  bool without_monitor = false;

  // Under the control channel (muster --recovery=in-place): the round this
  // communicator formed on, shared with the groups made from it; null
  // without the channel.
  std::shared_ptr<RoundState> round;
  int64_t round_generation = 0;  // round->generation() at creation
  int64_t formed_round = -1;     // the round's number at creation
  bool is_group = false;
  // Set by Recover: this rank's place in the ended round, so that NCCL can
  // shrink its communicator when only survivors remain.
  int previous_rank = -1;
  int previous_world_size = 0;
  int64_t previous_round = -1;
  // Bounds connecting, with options.timeout (Recover's own deadline).
  absl::Time connect_deadline = absl::InfiniteFuture();
};

// The backends of one communicator, as a BackendsConnector fills them in.
struct Backends {
  std::unique_ptr<Backend> host;    // Gloo, or null for NCCL only.
  std::unique_ptr<Backend> device;  // NCCL, or null.
  // In: the ended round's NCCL backend (Recover), aborted and kept so that
  // NCCL can shrink it when only survivors remain; null otherwise. The
  // connector takes it when it does; the core closes what is left.
  std::unique_ptr<Backend> previous_device;
  // Whether a pointer is device memory, which only `device` takes; null: no
  // pointer is.
  bool (*is_device_pointer)(const void* p) = nullptr;
};

// Connects the backends of `config`'s communicator into `backends` by
// `deadline`. Whatever it has connected when it fails is the core's to close
// (Shutdown), as on any later failure.
using BackendsConnector = std::function<absl::Status(
    const CoreConfig& config, absl::Time deadline, Backends& backends)>;

// Connects one backend over `config`'s ranks and store namespace by
// `deadline`: how a backend that builds on another (the shared-memory
// leaders' mesh, Gloo's small allreduces) gets it without naming it.
using BackendConnector = std::function<absl::StatusOr<std::unique_ptr<Backend>>(
    const CoreConfig& config, absl::Time deadline)>;

class CommCore {
 public:
  // Connects the backend(s) through `connect` and the peer monitor, then
  // confirms with a barrier. Blocks until done or the timeout.
  // `previous_device`: the ended round's NCCL backend (Recover), which NCCL
  // shrinks when only survivors remain; null otherwise.
  static absl::StatusOr<std::unique_ptr<CommCore>> Connect(
      CoreConfig config, const BackendsConnector& connect,
      std::unique_ptr<Backend> previous_device = nullptr);

  ~CommCore();

  int rank() const { return config_.rank; }
  int world_size() const { return config_.world_size; }
  const std::string& who() const { return who_; }
  absl::string_view backend_name() const;
  const CoreConfig& config() const { return config_; }

  // Checks op's arguments (INVALID_ARGUMENT naming the problem) and resolves
  // its timeout.
  absl::Status Validate(Op& op) const;
  absl::Status ValidateArguments(Op& op) const;

  // Runs a validated op on this thread (after earlier async collectives).
  absl::Status RunBlocking(const Op& op);
  // Queues a validated op; its result arrives in `state`.
  absl::Status RunAsync(Op op, std::shared_ptr<WorkState> state);

  bool IsShutDown() {
    absl::MutexLock lock(&mu_);
    return shut_down_;
  }

  // Why the communicator broke (an operation failed, or the monitor's
  // verdict: a lost peer); OK while it works.
  absl::Status BrokenStatus();

  // Per-list counter for NewGroup keys.
  int NextGroupSerial(const std::string& list);

  void Shutdown();

  // Recover: ends this communicator's round for good (operations in flight
  // and queued fail with `why`), shuts it down without the goodbye barrier,
  // and returns its NCCL backend (aborted but kept for ncclCommShrink), if
  // any.
  std::unique_ptr<Backend> EndForRecovery(const absl::Status& why);

  // Tests only: behave as a crashed process would (close everything without
  // a goodbye), then break.
  void CrashForTesting();

 private:
  struct Task {
    Op op;
    std::shared_ptr<WorkState> state;
    std::unique_ptr<PendingP2P> pending;  // Send/Recv only.
  };

  explicit CommCore(CoreConfig config);
  absl::Status ConnectImpl(const BackendsConnector& connect);

  // The backend for op's memory; FAILED_PRECONDITION when there is none.
  absl::StatusOr<Backend*> Pick(const Op& op);
  // Runs a collective on this thread: progress, deadline, failure handling.
  // `checked`: the caller has already run CheckUsableLocked.
  absl::Status Execute(const Op& op, bool checked = false);
  // Posts a Send/Recv.
  absl::StatusOr<std::unique_ptr<PendingP2P>> Post(const Op& op);
  absl::Status FinishP2P(const Op& op, PendingP2P& pending);
  // Turns a failed op's status into the one reported, breaks the
  // communicator, tells the peers when the failure started here.
  absl::Status Fail(const Op& op, absl::Status status);
  // From the monitor thread.
  void OnAbort(const absl::Status& why);
  absl::Status CheckUsable(const Op& op);
  absl::Status CheckUsableLocked(const Op& op)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FAILED_PRECONDITION naming the round when the control channel's round of
  // this communicator has ended.
  absl::Status CheckRoundLocked(const Op& op)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExecutorLoop();
  void CompletionLoop();

  const CoreConfig config_;
  const std::string who_;  // "rank 2/4"
  ProgressFile* const progress_;

  // Set while connecting; constant after. previous_device until
  // ConnectImpl is done.
  Backends backends_;
  std::unique_ptr<PeerMonitor> monitor_;

  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  // The monitor's verdict (a lost peer, a peer's failure, the round's end, a
  // timeout), if any.
  absl::Status abort_reason_ ABSL_GUARDED_BY(mu_);
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  int sync_p2p_ ABSL_GUARDED_BY(mu_) = 0;  // Blocking Send/Recv in flight.
  bool stop_threads_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Task> p2p_queue_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> group_serials_ ABSL_GUARDED_BY(mu_);
  // EndForRecovery: Shutdown leaves device_ open for NCCL's shrink.
  bool keep_device_ ABSL_GUARDED_BY(mu_) = false;
  std::thread executor_;
  std::thread completion_;
};

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_SRC_CORE_H_
