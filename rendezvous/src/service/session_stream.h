// SessionStream: one agent's Session stream on gRPC's async API, and the
// AgentChannel the Coordinator answers that agent through. SessionQueue: a
// server completion queue with the one thread that drains it.
//
// Why the async API and several queues: Debian builds libgrpc without NDEBUG,
// and one of its debug checks (cq_check_tag) scans, under the queue's lock,
// every operation pending on a completion queue each time one of them
// completes. The callback API puts every stream of the process on one queue,
// so at 10,000 agents each heartbeat paid a scan of some 20,000 pending
// operations: 29 % of musterd's CPU, and a cost per heartbeat that grew with
// the number of agents. Here the streams are spread over several queues (gRPC
// hands each new call to the queues' pending requests in turn), each drained
// by a thread of its own, so each scan covers 1/K of them.
//
// Threads: every completion of a stream arrives on its queue's one thread, in
// the order gRPC completes them, so its reads, the new-call event and the done
// notification are handled one at a time. Send, SendShared and Close come from
// any thread (the Coordinator's outbox, its tick, shutdown). A stream's state
// is under its mu_; gRPC operations are started with mu_ held (starting one
// never calls back into this code) and only while the queue takes them
// (SessionQueue::closed; starting one on a queue that is shut down aborts).
//
// Each stream has at most one read and one write outstanding; further
// messages wait in its own queue (out_), in order. Close finishes the stream
// once that queue is flushed.
//
// Lifetime: the stream is held by shared_ptr: by itself (self_) from its
// request until every operation it started has come back (kDone), by the
// Coordinator (as its AgentChannel) as long as it likes, and by the service's
// registry from the new call to kDone. The gRPC objects (context, stream) are
// freed at kDone; Send and Close after that are no-ops.
#ifndef MUSTER_RENDEZVOUS_SRC_SESSION_STREAM_H_
#define MUSTER_RENDEZVOUS_SRC_SESSION_STREAM_H_

#include <google/protobuf/arena.h>
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "muster/rendezvous/auth.h"
#include "muster/rendezvous/coordinator.h"
#include "muster/v1/rendezvous.grpc.pb.h"

namespace muster::rendezvous {

class SessionService;

// A completion queue for Session streams and its thread.
struct SessionQueue {
  std::unique_ptr<grpc::ServerCompletionQueue> cq;
  std::thread thread;
  // Set (then the queue is shut down) once the server has shut down: no
  // operation may be started on cq any more. Read-locked to start one.
  absl::Mutex mu;
  bool closed ABSL_GUARDED_BY(mu) = false;
};

class SessionStream final : public AgentChannel,
                            public std::enable_shared_from_this<SessionStream> {
 public:
  // Waits for the next Session call on queue: a new stream. service and queue
  // must outlive every stream (the service drains the queue before it goes).
  static void Await(SessionService* service, SessionQueue* queue);

  // Hands one completion of `queue` to its stream. Only from the queue's
  // thread.
  static void OnEvent(void* tag, bool ok);

  SessionStream(SessionService* service, SessionQueue* queue);
  ~SessionStream() override;

  // For the service once every queue is drained (so no operation is
  // outstanding): ends the stream if it has not ended. A stream whose Finish
  // could no longer start (Send or Close after the queue closed) ends here.
  void EndAfterDrain();

  // AgentChannel. Never block; thread-safe.
  void Send(const v1::ServerMessage& msg) override;
  void SendShared(std::shared_ptr<const v1::ServerMessage> msg) override;
  void Close(const absl::Status& status) override;
  // Close, with the leader named in the trailing metadata (a standby
  // replica's refusal; leader_gate.h). An empty leader adds nothing.
  void CloseNamingLeader(const absl::Status& status, std::string leader);
  // The server is ending every stream (shutdown, a standby): drops whatever
  // the Coordinator sends from now on, so that its reaction to the first
  // streams' end (a lost node, a Restart) never reaches an agent whose
  // stream is ended next: the server went away, no agent left, and the round
  // is re-adopted elsewhere with its workers running. Queued messages still
  // go out.
  void StopSending();
  // The held output (messages and a close that came while the leadership was
  // unconfirmed) goes out now, in order. From the service's ReleaseHeld.
  void ReleaseHeld() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // What a completion is for: the low bits of its tag.
  enum Op : uintptr_t { kNewCall = 0, kRead, kWrite, kFinish, kDone };
  static constexpr uintptr_t kOpMask = 7;

  // clang-format off
  //
  //   kRequested ─── new call ───► kOpen ─── Close, once no write is ───► kFinishing
  //       │                          │        in flight: Finish                │
  //       │                          │  (Close: the Coordinator, a refused     │ every
  //       │                          │   message, the agent's half-close, a    │ operation
  //       │                          │   cancellation, or the queue closing)   │ back
  //       │                          │                                         ▼
  //       └──── request failed (the server is shutting down) ───────────► kDone
  //
  // clang-format on
  enum class State { kRequested, kOpen, kFinishing, kDone };

  // The gRPC side, freed at kDone.
  struct Call {
    grpc::ServerContext context;
    grpc::ServerAsyncReaderWriter<v1::ServerMessage, v1::AgentMessage> stream{
        &context};
  };

  void* Tag(Op op) {
    return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(this) | op);
  }

  // The handlers of OnEvent, one per Op.
  void OnNewCall(bool ok);
  void OnRead(bool ok);
  void OnWrite(bool ok);
  void OnFinish();
  void OnCallDone();

  // Handles one message; returns whether to read on. While the leadership
  // is unconfirmed (leader_gate.h) the message waits in the service's
  // FencedInbox and Act runs on it later.
  bool Handle(const v1::AgentMessage& msg);
  // Hands one message to the Coordinator (or refuses it); returns whether to
  // read on.
  bool Act(const v1::AgentMessage& msg);
  // Whether an output must wait: this musterd leads but has not confirmed it
  // lately, or output from then still waits.
  bool MustHoldLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendLeaseRenewed(int64_t seq);
  // Tells the Coordinator once that this stream's agent is gone (if it ever
  // joined).
  void Disconnect();

  // Start an operation if the queue still takes them; when it does not, the
  // stream ends (Finish cannot be sent any more: the server has shut down).
  void StartReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartWriteLocked(std::shared_ptr<const v1::ServerMessage> msg)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Close, never held.
  void CloseLocked(const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts what the queue allows: returns false when it is closed.
  template <typename Start>
  bool StartOp(Start start) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The end of a stream: kFinishing → kDone once nothing is outstanding.
  // TakeEndLocked makes the transition and hands over what goes with it;
  // CompleteEnd, with mu_ released, tells the Coordinator and the service,
  // records the metric, then frees the gRPC objects (and drops self_).
  struct End {
    bool ended = false;
    grpc::StatusCode code = grpc::StatusCode::OK;
    std::unique_ptr<Call> call;
    std::shared_ptr<SessionStream> self;
  };
  End TakeEndLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CompleteEnd(End end) ABSL_LOCKS_EXCLUDED(mu_);
  // TakeEndLocked and CompleteEnd.
  void MaybeEnd() ABSL_LOCKS_EXCLUDED(mu_);

  SessionService* const service_;
  SessionQueue* const queue_;

  // Set on the new call, before any other thread can see the stream; read-only
  // after.
  ConnectionId id_ = 0;
  std::string peer_;
  Credential credential_;  // from the stream's metadata; never logged
  absl::Time start_;

  // The message being read: on arena_, which a read resets every few messages
  // (protobuf would otherwise free and allocate each Heartbeat as it parses).
  // Owned by the read path: one read outstanding at a time.
  static constexpr int kArenaBlockBytes = 1024;
  static constexpr int kReadsPerArena = 8;
  alignas(8) char arena_block_[kArenaBlockBytes];
  google::protobuf::Arena arena_;
  v1::AgentMessage* request_;
  int reads_on_arena_ = 0;

  // Event order towards the Coordinator: nothing after its OnDisconnect.
  // `ended_`: the stream ended (Disconnect ran); `told_gone_`: the
  // Coordinator was told so (at once, or when the FencedInbox replays it).
  // A stream that ended while the leadership was unconfirmed is never told
  // (its node is left to its heartbeat timeout, or to its own rejoin: a
  // paused leader decides nothing by its own clock), and what it sent before
  // is still acted on.
  absl::Mutex events_mu_;
  bool joined_ ABSL_GUARDED_BY(events_mu_) = false;
  bool ended_ ABSL_GUARDED_BY(events_mu_) = false;
  bool told_gone_ ABSL_GUARDED_BY(events_mu_) = false;

  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kRequested;
  std::unique_ptr<Call> call_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<SessionStream> self_ ABSL_GUARDED_BY(mu_);
  bool read_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool write_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool done_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;       // Close was called
  bool broken_ ABSL_GUARDED_BY(mu_) = false;        // a write failed
  bool stop_sending_ ABSL_GUARDED_BY(mu_) = false;  // StopSending
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
  std::string leader_trailer_ ABSL_GUARDED_BY(mu_);  // CloseNamingLeader
  // Messages waiting for the write in flight (Write serializes its message at
  // once, so the one in flight need not be kept).
  std::deque<std::shared_ptr<const v1::ServerMessage>> out_
      ABSL_GUARDED_BY(mu_);
  // Output fencing: what the Coordinator sent while this musterd could not
  // confirm its leadership, and a close then, kept until ReleaseHeld (the
  // leadership confirmed) or dropped when the stream ends (deposed).
  std::deque<std::shared_ptr<const v1::ServerMessage>> held_out_
      ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> held_close_ ABSL_GUARDED_BY(mu_);
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_SESSION_STREAM_H_
