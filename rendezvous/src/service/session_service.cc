#include "rendezvous/src/service/session_service.h"

#include <algorithm>
#include <thread>
#include <utility>
#include <vector>

#include "muster/common/logging.h"
#include "muster/store/grpc_status.h"
#include "rendezvous/src/core/status_page.h"
#include "rendezvous/src/service/grpc_auth.h"
#include "rendezvous/src/service/session_stream.h"

namespace muster::rendezvous {

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

SessionService::~SessionService() { StopStreams(); }

int SessionService::DefaultQueues() {
#if MUSTER_GRPC_CHECKS_CQ_TAGS
  return 128;
#else
  return std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 2,
                    16);
#endif
}

void SessionService::AddCompletionQueues(grpc::ServerBuilder& builder,
                                         int count) {
  for (int i = 0; i < std::max(count, 1); ++i) {
    auto queue = std::make_unique<SessionQueue>();
    queue->cq = builder.AddCompletionQueue(/*is_frequently_polled=*/true);
    queues_.push_back(std::move(queue));
  }
}

void SessionService::StartStreams() {
  for (const auto& queue : queues_) {
    SessionStream::Await(this, queue.get());
    queue->thread = std::thread([cq = queue->cq.get()] {
      void* tag = nullptr;
      bool ok = false;
      while (cq->Next(&tag, &ok)) SessionStream::OnEvent(tag, ok);
    });
  }
}

void SessionService::StopStreams() {
  if (streams_stopped_) return;
  streams_stopped_ = true;
  for (const auto& queue : queues_) {
    {
      absl::MutexLock lock(&queue->mu);
      queue->closed = true;
    }
    queue->cq->Shutdown();
  }
  for (const auto& queue : queues_) {
    if (queue->thread.joinable()) {
      queue->thread.join();
    } else {
      // Never started (the server did not start): gRPC's own requests on the
      // queue still come back.
      void* tag = nullptr;
      bool ok = false;
      while (queue->cq->Next(&tag, &ok)) SessionStream::OnEvent(tag, ok);
    }
  }
  // Nothing is outstanding now; a stream that could not send its Finish any
  // more (the queue closed first) ends here.
  std::vector<std::shared_ptr<SessionStream>> left;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, stream] : channels_) left.push_back(stream);
  }
  for (const auto& stream : left) stream->EndAfterDrain();
}

grpc::ServerUnaryReactor* SessionService::GetStatus(
    grpc::CallbackServerContext* context, const v1::GetStatusRequest* request,
    v1::GetStatusResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // A standby replica knows no jobs: `muster status` asks the leader.
  if (gate_ != nullptr && !gate_->serving()) {
    gate_->AddLeaderTrailer(*context);
    reactor->Finish(store::ToGrpcStatus(gate_->Check()));
    return reactor;
  }
  // One page (status_page.h): a request without paging fields (an old
  // client) gets the first page and the total.
  absl::StatusOr<StatusPageQuery> query = StatusPageQueryOf(*request);
  if (!query.ok()) {
    reactor->Finish(store::ToGrpcStatus(query.status()));
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
        reactor->Finish(store::ToGrpcStatus(allowed));
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
  std::vector<std::shared_ptr<SessionStream>> open;
  {
    absl::MutexLock lock(&mu_);
    closed_ = status;
    for (const auto& [id, stream] : channels_) open.push_back(stream);
  }
  // Two passes: no stream takes a new message once the first one ends (see
  // SessionStream::StopSending).
  for (const auto& stream : open) stream->StopSending();
  // Never held (SessionStream::Close holds while the leadership is
  // unconfirmed): the server is going.
  for (const auto& stream : open) stream->CloseNamingLeader(status, "");
}

void SessionService::EndOpen(const absl::Status& status,
                             const std::string& leader) {
  std::vector<std::shared_ptr<SessionStream>> open;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, stream] : channels_) open.push_back(stream);
  }
  // A replica that stands by (or was deposed) acts on nothing it held.
  if (const int64_t dropped = inbox_.Drop(); dropped > 0) {
    MUSTER_LOG(WARNING) << "dropped " << dropped
                        << " agent events held while the leadership was "
                           "unconfirmed: this replica no longer leads";
  }
  for (const auto& stream : open) stream->StopSending();
  for (const auto& stream : open) stream->CloseNamingLeader(status, leader);
}

int64_t SessionService::ReleaseHeld() {
  const int64_t replayed = inbox_.Replay();
  std::vector<std::weak_ptr<SessionStream>> holding;
  {
    absl::MutexLock lock(&mu_);
    if (gate_ == nullptr || !gate_->serving()) return replayed;
    holding.swap(holding_);
  }
  for (const auto& weak : holding) {
    if (auto stream = weak.lock()) stream->ReleaseHeld();
  }
  return replayed;
}

void SessionService::NoteHeldOutput(std::shared_ptr<SessionStream> stream) {
  absl::MutexLock lock(&mu_);
  holding_.push_back(stream);
}

int64_t SessionService::OpenStreams() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(channels_.size());
}

bool SessionService::Register(ConnectionId id,
                              std::shared_ptr<SessionStream> stream,
                              absl::Status* refusal) {
  absl::MutexLock lock(&mu_);
  channels_.emplace(id, std::move(stream));
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
