// The Rendezvous gRPC service: each Session stream is a SessionStream
// (session_stream.h) on gRPC's async API, spread over several completion
// queues with a thread each, that feeds the Coordinator and is the
// AgentChannel the Coordinator answers through; GetStatus is on the callback
// API. Thin: proto in, Coordinator call, proto out.
#ifndef MUSTER_RENDEZVOUS_SRC_SESSION_SERVICE_H_
#define MUSTER_RENDEZVOUS_SRC_SESSION_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "muster/rendezvous/auth.h"
#include "muster/rendezvous/coordinator.h"
#include "muster/v1/rendezvous.grpc.pb.h"
#include "rendezvous/src/service/fenced_inbox.h"
#include "rendezvous/src/service/leader_gate.h"
#include "rendezvous/src/service/metrics.h"
#include "rendezvous/src/service/stacks_relay.h"

namespace muster::rendezvous {

class SessionStream;
struct SessionQueue;

// Session on the async API, GetStatus on the callback API: gRPC registers
// each method of a service by its own kind.
using SessionServiceBase = v1::Rendezvous::WithAsyncMethod_Session<
    v1::Rendezvous::WithCallbackMethod_GetStatus<
        v1::Rendezvous::WithCallbackMethod_GetStacks<v1::Rendezvous::Service>>>;

// Thread-safe. Must outlive the grpc::Server it is registered with. The order:
// AddCompletionQueues, the server's BuildAndStart, StartStreams; at the end
// the server's Shutdown, then StopStreams.
class SessionService final : public SessionServiceBase {
 public:
  // coordinator must outlive the service; so must auth, which (when given)
  // decides each Join and GetStatus by the caller's authorization metadata
  // and binds a job to the token of its first accepted Join, and metrics (when
  // given), where each stream's end is recorded (the interceptor skips
  // streams).
  explicit SessionService(Coordinator* coordinator,
                          JobAuthRegistry* auth = nullptr,
                          RpcMetrics* metrics = nullptr);
  // Stops the streams if StopStreams was not called.
  ~SessionService() override;

  // The default number of Session completion queues (and threads). With a
  // gRPC built without NDEBUG (Debian's), each completed operation is looked
  // up in a list of every operation pending on its queue (cq_check_tag, a
  // linear scan), and every stream keeps a read pending: a queue's events cost
  // O(its streams), and a round of N agents O(N^2). 128 queues keep a queue
  // under 1,000 streams at 100,000 agents (2 queues: 30,000 agents formed in
  // 9.5 s, 128: 2.9 s; at 10,000 agents 128 cost 15 % more CPU, gRPC waking
  // another thread for more events; docs/performance.md). A gRPC built with
  // NDEBUG (the Windows build's) has no such list: one queue per core, 2 to
  // 16, costs least there.
  static int DefaultQueues();

  // Adds `count` (>= 1) completion queues for Session streams to builder.
  // Before builder.BuildAndStart.
  void AddCompletionQueues(grpc::ServerBuilder& builder, int count);
  // After the server started: waits for Session calls on every queue, each
  // drained by a thread of its own.
  void StartStreams();
  // After the server's Shutdown returned (every call finished or cancelled):
  // no operation starts any more, the queues shut down and are drained, their
  // threads joined, and every stream's gRPC objects freed. Idempotent.
  void StopStreams();

  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const v1::GetStatusRequest* request,
                                      v1::GetStatusResponse* response) override;
  // `muster stacks` (stacks_service.cc): relayed to the job's agents by
  // stacks_, answered when they all did or at the request's deadline.
  grpc::ServerUnaryReactor* GetStacks(grpc::CallbackServerContext* context,
                                      const v1::GetStacksRequest* request,
                                      v1::GetStacksResponse* response) override;
  // The relay, for the console's stacks view (console_api.h).
  StacksRelay* stacks() { return &stacks_; }

  // Ends every open stream with `status` (after its queued messages) and
  // refuses new streams with it. Does not block.
  void CloseAll(const absl::Status& status);

  // Replicas (leader_gate.h): Joins are refused with the gate's status while
  // it does not serve. `gate` must outlive the service; set before the
  // server starts.
  void SetGate(const LeaderGate* gate) {
    gate_ = gate;
    inbox_.SetGate(gate);
  }
  // The leadership is confirmed again after a lapse (or was never lost):
  // the held events reach the Coordinator in order, then the held output
  // leaves (fenced_inbox.h). From the server's tick thread. Returns how many
  // events were replayed.
  int64_t ReleaseHeld();
  // Events held since the start (tests, metrics).
  int64_t HeldEvents() const { return inbox_.held_total(); }
  // Ends every open stream with `status`, naming `leader` in its trailing
  // metadata when not empty (a leader deposed); new streams are still
  // accepted (and refused by the gate). Does not block.
  void EndOpen(const absl::Status& status, const std::string& leader);

  // Streams not yet done.
  int64_t OpenStreams() const;

 private:
  friend class SessionStream;

  // Registers a new stream until Unregister (its end). Returns
  // false once CloseAll was called, with the status to end the stream with in
  // *refusal.
  bool Register(ConnectionId id, std::shared_ptr<SessionStream> stream,
                absl::Status* refusal);
  void Unregister(ConnectionId id);
  // A stream holds output (SessionStream::SendShared): ReleaseHeld sends it.
  void NoteHeldOutput(std::shared_ptr<SessionStream> stream);

  // A Join: the job's token check, the Coordinator, then the binding, with no
  // other Join in between (so a job is never created unbound).
  absl::Status AuthorizedJoin(ConnectionId conn, const Credential& credential,
                              const v1::Join& join,
                              std::shared_ptr<AgentChannel> channel);

  Coordinator* const coordinator_;
  JobAuthRegistry* const auth_;
  RpcMetrics* const metrics_;
  const LeaderGate* gate_ = nullptr;
  std::atomic<ConnectionId> next_connection_{1};
  absl::Mutex join_mu_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<ConnectionId, std::shared_ptr<SessionStream>> channels_
      ABSL_GUARDED_BY(mu_);
  absl::Status closed_ ABSL_GUARDED_BY(mu_);  // non-OK after CloseAll
  // Streams with held output (NoteHeldOutput), released by ReleaseHeld.
  std::vector<std::weak_ptr<SessionStream>> holding_ ABSL_GUARDED_BY(mu_);
  // Events held while the leadership was unconfirmed (Handle, Disconnect).
  FencedInbox inbox_;

  // The Session queues; the vector is fixed once the server is built.
  std::vector<std::unique_ptr<SessionQueue>> queues_;
  bool streams_stopped_ = false;  // StopStreams only

  // Which stream is which job's agent, and the stacks requests in flight.
  // Declared last: destroyed first, completing what is pending.
  StacksRelay stacks_;
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_SESSION_SERVICE_H_
