// The Rendezvous gRPC service: each Session stream is a ServerBidiReactor that
// feeds the Coordinator and is the AgentChannel the Coordinator answers
// through. Thin: proto in, Coordinator call, proto out. Built on the callback
// API: no thread per stream.
#ifndef MUSTER_RENDEZVOUS_SRC_SESSION_SERVICE_H_
#define MUSTER_RENDEZVOUS_SRC_SESSION_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "muster/rendezvous/auth.h"
#include "muster/rendezvous/coordinator.h"
#include "muster/v1/rendezvous.grpc.pb.h"
#include "rendezvous/src/metrics.h"

namespace muster::rendezvous {

class SessionChannel;

// Thread-safe. Must outlive the grpc::Server it is registered with
// (Server::Shutdown waits for every stream to be done).
class SessionService final : public v1::Rendezvous::CallbackService {
 public:
  // coordinator must outlive the service; so must auth, which (when given)
  // decides each Join and GetStatus by the caller's authorization metadata
  // and binds a job to the token of its first accepted Join, and metrics (when
  // given), where each stream's end is recorded (the interceptor skips
  // streams).
  explicit SessionService(Coordinator* coordinator,
                          JobAuthRegistry* auth = nullptr,
                          RpcMetrics* metrics = nullptr);
  ~SessionService() override;

  grpc::ServerBidiReactor<v1::AgentMessage, v1::ServerMessage>* Session(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const v1::GetStatusRequest* request,
                                      v1::GetStatusResponse* response) override;

  // Ends every open stream with `status` (after its queued messages) and
  // refuses new streams with it. Does not block.
  void CloseAll(const absl::Status& status);

  // Streams not yet done.
  int64_t OpenStreams() const;

 private:
  class Reactor;
  friend class Reactor;

  // Registers a new stream's channel until Unregister (its OnDone). Returns
  // false once CloseAll was called, with the status to end the stream with in
  // *refusal.
  bool Register(ConnectionId id, std::shared_ptr<SessionChannel> channel,
                absl::Status* refusal);
  void Unregister(ConnectionId id);

  // A Join: the job's token check, the Coordinator, then the binding, with no
  // other Join in between (so a job is never created unbound).
  absl::Status AuthorizedJoin(ConnectionId conn, const Credential& credential,
                              const v1::Join& join,
                              std::shared_ptr<AgentChannel> channel);

  Coordinator* const coordinator_;
  JobAuthRegistry* const auth_;
  RpcMetrics* const metrics_;
  std::atomic<ConnectionId> next_connection_{1};
  absl::Mutex join_mu_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<ConnectionId, std::shared_ptr<SessionChannel>> channels_
      ABSL_GUARDED_BY(mu_);
  absl::Status closed_ ABSL_GUARDED_BY(mu_);  // non-OK after CloseAll
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_SESSION_SERVICE_H_
