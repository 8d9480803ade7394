// PeerMonitor: how a rank learns within milliseconds that a peer died, that a
// peer's operation failed, or that the launcher ended the round — instead of
// waiting for a collective's timeout.
//
// Why a separate channel: Gloo's TCP pairs only report a dead peer to the
// operations that use that pair at that moment. In a ring, rank 1 waiting on
// rank 0 never hears that rank 2 died; it waits for the timeout (30 minutes by
// default). The monitor gives every rank direct knowledge of every peer:
//
//   1. A full mesh of idle TCP connections (one per pair of ranks, set up
//      through the store when the communicator is created; the hello carries a
//      per-communicator token, so a stray connection is refused). Nothing
//      flows on them in normal operation. Messages:
//        'B'                  goodbye: the peer shuts down cleanly.
//        'A' len:u32 text     the peer's communicator failed; `text` says why.
//      A connection that closes without a goodbye means the peer's process
//      ended (the kernel closes its sockets whether it exited, crashed or was
//      SIGKILLed): every survivor sees the EOF at once and aborts with
//      ABORTED "peer rank N (pid P on HOST) was lost". TCP keepalive (idle
//      10 s, 3 probes 5 s apart) catches a machine that vanished.
//   2. A thread blocked in Store::Wait on a key that only Stop() writes. The
//      launcher's knowledge arrives through it: when musterd ends the round (a
//      worker failed, an agent was lost) it drops the round's namespace, and
//      the wait ends with ABORTED.
//   3. The deadline of the operation in flight (SetDeadline), checked by the
//      socket thread at least every 100 ms, so every algorithm and backend
//      gets the same per-call timeout.
//
// Every verdict goes to `on_abort` (first one only), from a monitor thread.
// The communicator core records it and aborts its backend; the operation in
// flight then fails and reports the verdict, which names the peer.
//
// Thread-safe.
#ifndef MUSTER_COMM_SRC_PEER_MONITOR_H_
#define MUSTER_COMM_SRC_PEER_MONITOR_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "comm/src/os.h"
#include "muster/store/store.h"

namespace muster::comm::internal {

struct PeerMonitorOptions {
  int rank = 0;
  int world_size = 1;  // > 1
  // The IP address to listen on (the one the backend uses).
  std::string bind_ip;
  // The communicator's namespace in the store.
  std::shared_ptr<store::Store> store;
  std::string key_prefix;
  // Bounds setting up the mesh.
  absl::Time deadline;
  // Receives the first verdict: ABORTED naming a peer or the launcher, or
  // DEADLINE_EXCEEDED when the operation in flight ran past its deadline.
  std::function<void(const absl::Status&)> on_abort;
};

class PeerMonitor {
 public:
  // Connects to every peer (rank i connects to every j > i and accepts every
  // j < i) and starts the threads. Blocks until connected or the deadline.
  // Errors: UNAVAILABLE (cannot listen or connect), DEADLINE_EXCEEDED naming
  // the peers missing, the store's errors.
  static absl::StatusOr<std::unique_ptr<PeerMonitor>> Start(
      PeerMonitorOptions options);

  ~PeerMonitor();  // Stop().

  // The deadline of the operation in flight; InfiniteFuture() when none.
  // Lock-free: called twice per operation.
  void SetDeadline(absl::Time deadline);

  // Tells every peer that this rank's communicator failed with `why`. Best
  // effort, does not block.
  void TellPeers(const absl::Status& why);

  // Whether `peer` said goodbye (shut down cleanly).
  bool PeerShutDown(int peer) const;

  // Says goodbye to every peer, stops and joins the threads, closes the
  // connections. Idempotent. Blocks for at most about 10 s (a store that does
  // not answer), normally microseconds.
  void Stop();

  // Tests only: closes every connection without a goodbye, as a crash does.
  void CrashForTesting();

 private:
  struct Peer {
    int rank = -1;
    Socket socket;
    std::string name;  // "rank 2 (pid 4242 on host-a)"
    std::string inbox;
    bool said_goodbye = false;
  };

  explicit PeerMonitor(PeerMonitorOptions options);
  absl::Status Connect();
  void SocketLoop();
  void StoreLoop();
  // Reads what peer p has sent; false when its connection ended.
  bool Drain(Peer& p);
  void Verdict(const absl::Status& status);
  std::string StopKey() const;

  const PeerMonitorOptions options_;
  const std::string who_;  // "rank 1/4"
  // Wakes the socket thread to stop.
  std::unique_ptr<Wakeup> wake_;
  std::vector<Peer> peers_;  // Indexed by rank; peers_[rank] has no socket.

  std::atomic<int64_t> deadline_ns_{0};  // 0: none.
  std::atomic<bool> verdict_given_{false};
  std::atomic<bool> stopping_{false};
  absl::Notification store_stop_;

  mutable absl::Mutex mu_;
  std::vector<bool> goodbye_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // Sending on the peers' sockets (TellPeers, Stop) vs closing them.
  absl::Mutex send_mu_;

  std::thread socket_thread_;
  std::thread store_thread_;
};

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_SRC_PEER_MONITOR_H_
