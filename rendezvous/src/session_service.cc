#include "rendezvous/src/session_service.h"

#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "muster/common/logging.h"
#include "rendezvous/src/grpc_security.h"
#include "rendezvous/src/grpc_status.h"
#include "rendezvous/src/status_page.h"

namespace muster::rendezvous {

using SessionReactor =
    grpc::ServerBidiReactor<v1::AgentMessage, v1::ServerMessage>;

// The write side of one Session stream, and the AgentChannel the Coordinator
// holds for the agent.
//
// Shared (shared_ptr) by the reactor, which owns it, the Coordinator, which may
// keep it after the stream is gone, and the service's registry (for shutdown).
// Lifetime rule: the reactor is deleted in OnDone, which gRPC calls only after
// Finish has completed; Finish is called only from here, after `finished_` is
// set under the lock, and from then on nothing here touches the reactor. Detach
// (from OnDone) clears the pointer as well, so Send/Close after OnDone are
// no-ops.
//
// Writes: one in flight at a time (`writing_`); Send queues the rest,
// OnWriteDone starts the next. Close marks the stream closing and finishes it
// once the queue is flushed. Reactor calls (StartWrite, Finish) are made
// outside the lock.
class SessionChannel final : public AgentChannel {
 public:
  explicit SessionChannel(SessionReactor* reactor) : reactor_(reactor) {}

  void Send(const v1::ServerMessage& msg) override {
    SendShared(std::make_shared<const v1::ServerMessage>(msg));
  }

  // A broadcast's message is shared by every stream it goes to, not copied.
  void SendShared(std::shared_ptr<const v1::ServerMessage> msg) override {
    SessionReactor* reactor = nullptr;
    const v1::ServerMessage* write = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (reactor_ == nullptr || closing_ || broken_) return;
      if (write_in_flight_) {
        queue_.push_back(std::move(msg));
        return;
      }
      write_in_flight_ = true;
      writing_ = std::move(msg);
      write = writing_.get();
      reactor = reactor_;
    }
    reactor->StartWrite(write);
  }

  void Close(const absl::Status& status) override {
    SessionReactor* reactor = nullptr;
    grpc::Status final_status;
    {
      absl::MutexLock lock(&mu_);
      if (reactor_ == nullptr || closing_) return;
      closing_ = true;
      final_status_ = ToGrpcStatus(status);
      if (write_in_flight_)
        return;  // OnWriteDone finishes after the queue is flushed.
      finished_ = true;
      reactor = reactor_;
      final_status = final_status_;
    }
    reactor->Finish(final_status);
  }

  // From the reactor's OnWriteDone.
  void OnWriteDone(bool ok) {
    SessionReactor* reactor = nullptr;
    const v1::ServerMessage* write = nullptr;
    grpc::Status final_status;
    {
      absl::MutexLock lock(&mu_);
      write_in_flight_ = false;
      if (!ok) {
        // The stream is broken (cancelled, peer gone): nothing more will get
        // through. The reactor's OnCancel or failed read closes it.
        broken_ = true;
        queue_.clear();
      }
      if (reactor_ == nullptr || finished_) return;
      if (!queue_.empty()) {
        writing_ = std::move(queue_.front());
        queue_.pop_front();
        write_in_flight_ = true;
        write = writing_.get();
      } else if (closing_) {
        finished_ = true;
        final_status = final_status_;
      } else {
        return;
      }
      reactor = reactor_;
    }
    if (write != nullptr) {
      reactor->StartWrite(write);
    } else {
      reactor->Finish(final_status);
    }
  }

  bool closing() const {
    absl::MutexLock lock(&mu_);
    return closing_;
  }

  // The status the stream ended with (OK until Close).
  grpc::StatusCode final_code() const {
    absl::MutexLock lock(&mu_);
    return final_status_.error_code();
  }

  // From the reactor's OnDone: the reactor is about to be deleted.
  void Detach() {
    absl::MutexLock lock(&mu_);
    reactor_ = nullptr;
    queue_.clear();
  }

 private:
  mutable absl::Mutex mu_;
  SessionReactor* reactor_ ABSL_GUARDED_BY(mu_);
  std::deque<std::shared_ptr<const v1::ServerMessage>> queue_
      ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
  // The message of the write in flight (kept alive until OnWriteDone): set only
  // while no write is in flight, read by gRPC until then.
  std::shared_ptr<const v1::ServerMessage> writing_;
};

namespace {

// The method name the metrics use, as gRPC's interceptors name it.
constexpr char kSessionMethod[] = "/muster.v1.Rendezvous/Session";

const char* KindName(const v1::AgentMessage& msg) {
  switch (msg.kind_case()) {
    case v1::AgentMessage::kJoin:
      return "Join";
    case v1::AgentMessage::kHeartbeat:
      return "Heartbeat";
    case v1::AgentMessage::kWorkersFailed:
      return "WorkersFailed";
    case v1::AgentMessage::kWorkersSucceeded:
      return "WorkersSucceeded";
    case v1::AgentMessage::kLeave:
      return "Leave";
    case v1::AgentMessage::kPreflightFailed:
      return "PreflightFailed";
    case v1::AgentMessage::KIND_NOT_SET:
      break;
  }
  return "an empty message";
}

}  // namespace

// One Session stream. Reads one message at a time and hands it to the
// Coordinator; events from this stream reach the Coordinator in order and never
// after its OnDisconnect (events_mu_).
class SessionService::Reactor final : public SessionReactor {
 public:
  Reactor(SessionService* service, ConnectionId id, std::string peer,
          Credential credential)
      : service_(service),
        coordinator_(service->coordinator_),
        id_(id),
        peer_(std::move(peer)),
        credential_(std::move(credential)),
        start_(absl::Now()),
        channel_(std::make_shared<SessionChannel>(this)) {
    absl::Status refusal;
    if (!service_->Register(id_, channel_, &refusal)) {
      channel_->Close(refusal);
      return;
    }
    MUSTER_LOG(DEBUG) << "session " << id_ << " opened by " << peer_;
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The agent half-closed (Close), or the stream broke. Either way this
      // agent is gone.
      MUSTER_LOG(DEBUG) << "session " << id_ << " from " << peer_
                        << " ended by the agent";
      Disconnect();
      channel_->Close(absl::OkStatus());
      return;
    }
    if (Handle(request_)) StartRead(&request_);
  }

  void OnWriteDone(bool ok) override { channel_->OnWriteDone(ok); }

  void OnCancel() override {
    MUSTER_LOG(DEBUG) << "session " << id_ << " from " << peer_ << " cancelled";
    Disconnect();
    channel_->Close(absl::CancelledError("the session was cancelled"));
  }

  void OnDone() override {
    channel_->Detach();
    Disconnect();
    service_->Unregister(id_);
    if (service_->metrics_ != nullptr) {
      service_->metrics_->Observe(kSessionMethod, channel_->final_code(),
                                  absl::Now() - start_);
    }
    delete this;
  }

 private:
  // Returns whether to read on.
  bool Handle(const v1::AgentMessage& msg) {
    absl::Status refused;
    {
      absl::MutexLock lock(&events_mu_);
      if (disconnected_) return false;
      if (!joined_ && msg.kind_case() != v1::AgentMessage::kJoin) {
        refused = absl::InvalidArgumentError(absl::StrCat(
            "the first message of a Session must be Join, not ", KindName(msg),
            " (is the agent a muster of the same protocol version?)"));
      } else {
        switch (msg.kind_case()) {
          case v1::AgentMessage::kJoin:
            refused = service_->AuthorizedJoin(id_, credential_, msg.join(),
                                               channel_);
            if (refused.ok()) joined_ = true;
            // Lease fencing: the accepted Join starts the agent's lease.
            if (refused.ok() && msg.join().lease_seq() != 0)
              SendLeaseRenewed(msg.join().lease_seq());
            break;
          case v1::AgentMessage::kHeartbeat:
            if (coordinator_->OnHeartbeat(id_, msg.heartbeat()))
              SendLeaseRenewed(msg.heartbeat().seq());
            break;
          case v1::AgentMessage::kWorkersFailed:
            coordinator_->OnWorkersFailed(id_, msg.workers_failed());
            break;
          case v1::AgentMessage::kWorkersSucceeded:
            coordinator_->OnWorkersSucceeded(id_, msg.workers_succeeded());
            break;
          case v1::AgentMessage::kLeave:
            coordinator_->OnLeave(id_, msg.leave());
            break;
          case v1::AgentMessage::kPreflightFailed:
            coordinator_->OnPreflightFailed(id_, msg.preflight_failed());
            break;
          case v1::AgentMessage::KIND_NOT_SET:
            // A newer agent's message this server does not know: ignore it.
            MUSTER_LOG(DEBUG)
                << "session " << id_ << ": ignoring a message of unknown kind";
            break;
        }
      }
    }
    if (!refused.ok()) {
      MUSTER_LOG(WARNING) << "refused " << KindName(msg) << " from " << peer_
                          << ": " << refused.message();
      channel_->Close(refused);
      return false;
    }
    return !channel_->closing();
  }

  // Lease fencing (lease.h): a small message, about four per lease per agent.
  void SendLeaseRenewed(int64_t seq) {
    auto msg = std::make_shared<v1::ServerMessage>();
    msg->mutable_lease_renewed()->set_seq(seq);
    channel_->SendShared(std::move(msg));
  }

  // Tells the Coordinator once that this stream's agent is gone (if it ever
  // joined).
  void Disconnect() {
    absl::MutexLock lock(&events_mu_);
    if (disconnected_) return;
    disconnected_ = true;
    if (joined_) coordinator_->OnDisconnect(id_);
  }

  SessionService* const service_;
  Coordinator* const coordinator_;
  const ConnectionId id_;
  const std::string peer_;
  const Credential credential_;  // from the stream's metadata; never logged
  const absl::Time start_;
  const std::shared_ptr<SessionChannel> channel_;
  // Owned by the read path: one read in flight at a time.
  v1::AgentMessage request_;

  absl::Mutex events_mu_;
  bool joined_ ABSL_GUARDED_BY(events_mu_) = false;
  bool disconnected_ ABSL_GUARDED_BY(events_mu_) = false;
};

SessionService::SessionService(Coordinator* coordinator, JobAuthRegistry* auth,
                               RpcMetrics* metrics)
    : coordinator_(coordinator), auth_(auth), metrics_(metrics) {}

absl::Status SessionService::AuthorizedJoin(
    ConnectionId conn, const Credential& credential, const v1::Join& join,
    std::shared_ptr<AgentChannel> channel) {
  if (auth_ == nullptr) return coordinator_->OnJoin(conn, join, channel);
  absl::MutexLock lock(&join_mu_);
  absl::Status allowed = auth_->Check(credential, Access::kJoin, join.job_id());
  if (!allowed.ok()) return allowed;
  absl::Status joined = coordinator_->OnJoin(conn, join, std::move(channel));
  if (joined.ok()) auth_->Bind(join.job_id(), credential);
  return joined;
}

SessionService::~SessionService() = default;

grpc::ServerBidiReactor<v1::AgentMessage, v1::ServerMessage>*
SessionService::Session(grpc::CallbackServerContext* context) {
  return new Reactor(this, next_connection_.fetch_add(1), context->peer(),
                     CredentialOf(*context));
}

grpc::ServerUnaryReactor* SessionService::GetStatus(
    grpc::CallbackServerContext* context, const v1::GetStatusRequest* request,
    v1::GetStatusResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // One page (status_page.h): a request without paging fields (an old
  // client) gets the first page and the total.
  absl::StatusOr<StatusPageQuery> query = StatusPageQueryOf(*request);
  if (!query.ok()) {
    reactor->Finish(ToGrpcStatus(query.status()));
    return reactor;
  }
  const Credential credential =
      auth_ != nullptr ? CredentialOf(*context) : Credential();
  if (auth_ != nullptr) {
    // One job: the caller may see it or is told why not. Every job: those it
    // may see, silently (a job's existence is not a secret, its details are),
    // and only those are counted in total_jobs.
    if (!request->job_id().empty()) {
      absl::Status allowed =
          auth_->Check(credential, Access::kStatus, request->job_id());
      if (!allowed.ok()) {
        reactor->Finish(ToGrpcStatus(allowed));
        return reactor;
      }
    }
    query->visible = [this, &credential](absl::string_view job_id) {
      return auth_->Check(credential, Access::kStatus, job_id).ok();
    };
  }
  *response = coordinator_->StatusPage(*query);
  response->set_server_version(MUSTER_VERSION);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

void SessionService::CloseAll(const absl::Status& status) {
  std::vector<std::shared_ptr<SessionChannel>> open;
  {
    absl::MutexLock lock(&mu_);
    closed_ = status;
    for (const auto& [id, channel] : channels_) open.push_back(channel);
  }
  for (const auto& channel : open) channel->Close(status);
}

int64_t SessionService::OpenStreams() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(channels_.size());
}

bool SessionService::Register(ConnectionId id,
                              std::shared_ptr<SessionChannel> channel,
                              absl::Status* refusal) {
  absl::MutexLock lock(&mu_);
  channels_.emplace(id, std::move(channel));
  if (!closed_.ok()) {
    *refusal = closed_;
    return false;
  }
  return true;
}

void SessionService::Unregister(ConnectionId id) {
  absl::MutexLock lock(&mu_);
  channels_.erase(id);
}

}  // namespace muster::rendezvous
