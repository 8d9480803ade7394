#include "rendezvous/src/service/session_stream.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "muster/common/logging.h"
#include "muster/store/grpc_status.h"
#include "rendezvous/src/service/grpc_auth.h"
#include "rendezvous/src/service/leader_gate.h"
#include "rendezvous/src/service/session_service.h"

namespace muster::rendezvous {
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
    case v1::AgentMessage::kStacksReport:
      return "StacksReport";
    case v1::AgentMessage::KIND_NOT_SET:
      break;
  }
  return "an empty message";
}

google::protobuf::ArenaOptions ArenaOn(char* block, size_t size) {
  google::protobuf::ArenaOptions options;
  options.initial_block = block;
  options.initial_block_size = size;
  return options;
}

}  // namespace

SessionStream::SessionStream(SessionService* service, SessionQueue* queue)
    : service_(service),
      queue_(queue),
      arena_(ArenaOn(arena_block_, sizeof(arena_block_))),
      request_(
          google::protobuf::Arena::CreateMessage<v1::AgentMessage>(&arena_)) {}

SessionStream::~SessionStream() = default;

void SessionStream::Await(SessionService* service, SessionQueue* queue) {
  auto stream = std::make_shared<SessionStream>(service, queue);
  absl::MutexLock lock(&stream->mu_);
  stream->call_ = std::make_unique<Call>();
  // Read here, under mu_: StartOp runs the lambda with mu_ held, but the
  // analysis cannot match a lambda's stream->mu_ with StartOp's mu_.
  Call* call = stream->call_.get();
  // The done notification comes only for a call that started (ok new call).
  call->context.AsyncNotifyWhenDone(stream->Tag(kDone));
  const bool started = stream->StartOp([&] {
    service->RequestSession(&call->context, &call->stream, queue->cq.get(),
                            queue->cq.get(), stream->Tag(kNewCall));
  });
  // Not started: the queue is closed and the stream is simply dropped.
  if (started) stream->self_ = stream;
}

void SessionStream::OnEvent(void* tag, bool ok) {
  const uintptr_t bits = reinterpret_cast<uintptr_t>(tag);
  auto* stream = reinterpret_cast<SessionStream*>(bits & ~kOpMask);
  // An operation of the stream was outstanding until now, so self_ holds it;
  // the handler may end the stream (drop self_), hence this reference.
  std::shared_ptr<SessionStream> keep = stream->shared_from_this();
  switch (static_cast<Op>(bits & kOpMask)) {
    case kNewCall:
      stream->OnNewCall(ok);
      break;
    case kRead:
      stream->OnRead(ok);
      break;
    case kWrite:
      stream->OnWrite(ok);
      break;
    case kFinish:
      stream->OnFinish();
      break;
    case kDone:
      stream->OnCallDone();
      break;
  }
}

template <typename Start>
bool SessionStream::StartOp(Start start) {
  absl::ReaderMutexLock lock(&queue_->mu);
  if (queue_->closed) return false;
  start();
  return true;
}

void SessionStream::OnNewCall(bool ok) {
  if (!ok) {
    // The server is shutting down: no call, and no done notification.
    std::shared_ptr<SessionStream> self;
    std::unique_ptr<Call> call;
    absl::MutexLock lock(&mu_);
    state_ = State::kDone;
    call = std::move(call_);
    self = std::move(self_);
    return;
  }
  // The next stream of this queue waits for its call at once.
  Await(service_, queue_);
  grpc::ServerContext* context = nullptr;
  {
    absl::MutexLock lock(&mu_);
    context = &call_->context;
    state_ = State::kOpen;
    done_pending_ = true;
  }
  // Set before any other thread can see the stream (Register).
  id_ = service_->next_connection_.fetch_add(1);
  peer_ = context->peer();
  credential_ = CredentialOf(*context);
  start_ = absl::Now();
  absl::Status refusal;
  if (!service_->Register(id_, shared_from_this(), &refusal)) {
    Close(refusal);
    MaybeEnd();
    return;
  }
  MUSTER_LOG(DEBUG) << "session " << id_ << " opened by " << peer_;
  absl::MutexLock lock(&mu_);
  if (state_ == State::kOpen && !closing_) StartReadLocked();
}

void SessionStream::OnRead(bool ok) {
  if (!ok) {
    // The agent half-closed (Close), or the stream broke. Either way this
    // agent is gone.
    MUSTER_LOG(DEBUG) << "session " << id_ << " from " << peer_
                      << " ended by the agent";
    {
      absl::MutexLock lock(&mu_);
      read_pending_ = false;
    }
    Disconnect();
    Close(absl::OkStatus());
    MaybeEnd();
    return;
  }
  // (read_pending_ stays set meanwhile: only this thread ends the stream.)
  const bool read_on = Handle(*request_);
  if (read_on && ++reads_on_arena_ >= kReadsPerArena) {
    // No read is outstanding: the message can go with its arena.
    reads_on_arena_ = 0;
    arena_.Reset();
    request_ =
        google::protobuf::Arena::CreateMessage<v1::AgentMessage>(&arena_);
  }
  End end;
  {
    absl::MutexLock lock(&mu_);
    read_pending_ = false;
    if (read_on && state_ == State::kOpen && !closing_) StartReadLocked();
    end = TakeEndLocked();
  }
  CompleteEnd(std::move(end));
}

void SessionStream::OnWrite(bool ok) {
  End end;
  {
    absl::MutexLock lock(&mu_);
    write_pending_ = false;
    if (!ok) {
      // The stream is broken (cancelled, peer gone): nothing more will get
      // through. The failed read or the done notification closes it.
      broken_ = true;
      out_.clear();
    }
    if (state_ == State::kOpen) {
      if (!out_.empty()) {
        std::shared_ptr<const v1::ServerMessage> next = std::move(out_.front());
        out_.pop_front();
        StartWriteLocked(std::move(next));
      } else if (closing_) {
        StartFinishLocked();
      }
    }
    end = TakeEndLocked();
  }
  CompleteEnd(std::move(end));
}

void SessionStream::OnFinish() {
  End end;
  {
    absl::MutexLock lock(&mu_);
    finish_pending_ = false;
    end = TakeEndLocked();
  }
  CompleteEnd(std::move(end));
}

void SessionStream::OnCallDone() {
  bool cancelled = false;
  {
    absl::MutexLock lock(&mu_);
    done_pending_ = false;
    cancelled = call_->context.IsCancelled();
  }
  if (cancelled) {
    MUSTER_LOG(DEBUG) << "session " << id_ << " from " << peer_ << " cancelled";
    Disconnect();
    Close(absl::CancelledError("the session was cancelled"));
  }
  MaybeEnd();
}

void SessionStream::EndAfterDrain() {
  End end;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == State::kDone) return;
    state_ = State::kFinishing;
    read_pending_ = write_pending_ = finish_pending_ = done_pending_ = false;
    end = TakeEndLocked();
  }
  CompleteEnd(std::move(end));
}

void SessionStream::Send(const v1::ServerMessage& msg) {
  SendShared(std::make_shared<const v1::ServerMessage>(msg));
}

bool SessionStream::MustHoldLocked() const {
  const LeaderGate* const gate = service_->gate_;
  if (gate == nullptr) return false;
  if (!held_out_.empty() || held_close_.has_value()) return gate->leads();
  return gate->leads() && !gate->serving();
}

// A broadcast's message is shared by every stream it goes to, not copied.
void SessionStream::SendShared(std::shared_ptr<const v1::ServerMessage> msg) {
  bool first_held = false;
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kOpen || closing_ || broken_ || stop_sending_) return;
    if (held_close_.has_value()) return;  // nothing after a close
    if (MustHoldLocked()) {
      // Output fencing: no message leaves unless the leadership was
      // confirmed lately; it waits for the confirmation (ReleaseHeld), or
      // is dropped with the stream when this replica was deposed.
      first_held = held_out_.empty();
      held_out_.push_back(std::move(msg));
    } else if (write_pending_) {
      out_.push_back(std::move(msg));
      return;
    } else {
      StartWriteLocked(std::move(msg));
      return;
    }
  }
  if (first_held) service_->NoteHeldOutput(shared_from_this());
}

void SessionStream::ReleaseHeld() {
  // Under mu_ throughout, so that nothing sent meanwhile overtakes it.
  absl::MutexLock lock(&mu_);
  std::deque<std::shared_ptr<const v1::ServerMessage>> held;
  held.swap(held_out_);
  std::optional<absl::Status> close;
  close.swap(held_close_);
  if (state_ != State::kOpen || closing_) return;
  if (!broken_ && !stop_sending_) {
    for (auto& msg : held) {
      if (write_pending_) {
        out_.push_back(std::move(msg));
      } else {
        StartWriteLocked(std::move(msg));
      }
    }
  }
  if (close.has_value()) CloseLocked(*close);
}

void SessionStream::Close(const absl::Status& status) {
  bool first_held = false;
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kOpen || closing_) return;
    if (!MustHoldLocked()) {
      CloseLocked(status);
      return;
    }
    if (held_close_.has_value()) return;
    first_held = held_out_.empty();
    held_close_ = status;
  }
  if (first_held) service_->NoteHeldOutput(shared_from_this());
}

void SessionStream::CloseLocked(const absl::Status& status) {
  // A standby (or a server shutting down) ends the stream now: what was held
  // for a confirmation that will not come never leaves.
  held_out_.clear();
  held_close_.reset();
  closing_ = true;
  final_status_ = store::ToGrpcStatus(status);
  // Else OnWrite finishes once the queue is flushed.
  if (!write_pending_) StartFinishLocked();
}

void SessionStream::StopSending() {
  absl::MutexLock lock(&mu_);
  stop_sending_ = true;
}

void SessionStream::CloseNamingLeader(const absl::Status& status,
                                      std::string leader) {
  // A standby's refusal, or the end of every stream of a replica that stood
  // by or was deposed: never held.
  absl::MutexLock lock(&mu_);
  if (state_ != State::kOpen || closing_) return;
  leader_trailer_ = std::move(leader);
  CloseLocked(status);
}

void SessionStream::StartReadLocked() {
  if (StartOp([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        call_->stream.Read(request_, Tag(kRead));
      })) {
    read_pending_ = true;
    return;
  }
  closing_ = true;
  if (!write_pending_) StartFinishLocked();
}

void SessionStream::StartWriteLocked(
    std::shared_ptr<const v1::ServerMessage> msg) {
  // Fencing token: the Coordinator stamps what it builds; anything else
  // (a lease renewal, a stacks request) is stamped here.
  if (service_->gate_ != nullptr) {
    const int64_t epoch = service_->gate_->epoch();
    if (msg->epoch() != epoch) {
      auto stamped = std::make_shared<v1::ServerMessage>(*msg);
      stamped->set_epoch(epoch);
      msg = std::move(stamped);
    }
  }
  if (StartOp([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        call_->stream.Write(*msg, Tag(kWrite));
      })) {
    write_pending_ = true;
    return;
  }
  broken_ = true;
  closing_ = true;
  StartFinishLocked();
}

void SessionStream::StartFinishLocked() {
  state_ = State::kFinishing;
  out_.clear();
  if (!leader_trailer_.empty() && call_ != nullptr) {
    call_->context.AddTrailingMetadata(store::kLeaderMetadataKey,
                                       leader_trailer_);
  }
  if (StartOp([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        call_->stream.Finish(final_status_, Tag(kFinish));
      }))
    finish_pending_ = true;
}

SessionStream::End SessionStream::TakeEndLocked() {
  End end;
  if (state_ != State::kFinishing || read_pending_ || write_pending_ ||
      finish_pending_ || done_pending_) {
    return end;
  }
  state_ = State::kDone;
  end.ended = true;
  end.code = final_status_.error_code();
  end.call = std::move(call_);
  end.self = std::move(self_);
  return end;
}

void SessionStream::CompleteEnd(End end) {
  if (!end.ended) return;
  Disconnect();
  service_->Unregister(id_);
  if (service_->metrics_ != nullptr) {
    service_->metrics_->Observe(kSessionMethod, end.code, absl::Now() - start_);
  }
  // end.call, then (unless the Coordinator still holds it) the stream, go
  // here.
}

void SessionStream::MaybeEnd() {
  End end;
  {
    absl::MutexLock lock(&mu_);
    end = TakeEndLocked();
  }
  CompleteEnd(std::move(end));
}

bool SessionStream::Handle(const v1::AgentMessage& msg) {
  const LeaderGate* const gate = service_->gate_;
  if (gate != nullptr && gate->leads() && service_->inbox_.HoldIfFenced([&] {
        // The arena's message is reused by the next read: keep a copy.
        return [self = shared_from_this(),
                copy = std::make_shared<v1::AgentMessage>(msg)] {
          // A refusal closes the stream itself; a stream already gone is
          // skipped.
          (void)self->Act(*copy);
        };
      })) {
    return true;  // held; reading on keeps the stream's order in the inbox
  }
  return Act(msg);
}

bool SessionStream::Act(const v1::AgentMessage& msg) {
  absl::Status refused;
  std::string standby_leader;
  Coordinator* const coordinator = service_->coordinator_;
  {
    absl::MutexLock lock(&events_mu_);
    if (told_gone_) return false;
    if (service_->gate_ != nullptr && !service_->gate_->leads()) {
      // A standby serves no Session: the agent goes to the leader the
      // refusal names, or tries the replicas again. (A leader that cannot
      // confirm its leadership holds the message instead: Handle.)
      refused = service_->gate_->Check();
      standby_leader = service_->gate_->leader();
    } else if (!joined_ && msg.kind_case() != v1::AgentMessage::kJoin) {
      refused = absl::InvalidArgumentError(absl::StrCat(
          "the first message of a Session must be Join, not ", KindName(msg),
          " (is the agent a muster of the same protocol version?)"));
    } else {
      switch (msg.kind_case()) {
        case v1::AgentMessage::kJoin:
          refused = service_->AuthorizedJoin(id_, credential_, msg.join(),
                                             shared_from_this());
          if (refused.ok()) {
            joined_ = true;
            service_->stacks_.OnJoined(id_, msg.join(), weak_from_this());
          }
          // Lease fencing: the accepted Join starts the agent's lease, if
          // it needs one now: an agent that takes its renewal from
          // RoundReady needs none while it has no workers (lease.h).
          if (refused.ok() && msg.join().lease_seq() != 0 &&
              (!msg.join().lease_from_round_ready() ||
               msg.join().claim().workers_running()))
            SendLeaseRenewed(msg.join().lease_seq());
          break;
        case v1::AgentMessage::kHeartbeat:
          if (coordinator->OnHeartbeat(id_, msg.heartbeat()))
            SendLeaseRenewed(msg.heartbeat().seq());
          break;
        case v1::AgentMessage::kWorkersFailed:
          coordinator->OnWorkersFailed(id_, msg.workers_failed());
          break;
        case v1::AgentMessage::kWorkersSucceeded:
          coordinator->OnWorkersSucceeded(id_, msg.workers_succeeded());
          break;
        case v1::AgentMessage::kLeave:
          coordinator->OnLeave(id_, msg.leave());
          break;
        case v1::AgentMessage::kPreflightFailed:
          coordinator->OnPreflightFailed(id_, msg.preflight_failed());
          break;
        case v1::AgentMessage::kStacksReport:  // `muster stacks`
          service_->stacks_.OnReport(id_, msg.stacks_report());
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
    CloseNamingLeader(refused, std::move(standby_leader));
    return false;
  }
  return true;
}

// Lease fencing (lease.h): a small message, about four per lease per agent
// while it runs workers, and only to agents that send a seq. It carries the
// heartbeat budget's current interval, so a running round follows the server's
// load.
void SessionStream::SendLeaseRenewed(int64_t seq) {
  auto msg = std::make_shared<v1::ServerMessage>();
  v1::LeaseRenewed* renewed = msg->mutable_lease_renewed();
  renewed->set_seq(seq);
  renewed->set_heartbeat_interval_ms(absl::ToInt64Milliseconds(
      service_->coordinator_->SuggestedHeartbeatInterval(id_)));
  SendShared(std::move(msg));
}

void SessionStream::Disconnect() {
  {
    absl::MutexLock lock(&events_mu_);
    if (ended_) return;
    ended_ = true;
  }
  // A `muster stacks` request waiting for this agent fails now: that decides
  // nothing.
  service_->stacks_.OnGone(id_);
  const LeaderGate* const gate = service_->gate_;
  if (gate != nullptr && !gate->serving()) {
    // Ended while this musterd cannot confirm that it still leads (etcd
    // slow, or this process was paused), or after it stood by: perhaps the
    // agent left for the leader that replaced it. Losing the node now would
    // act on this process's own stale view. A standby decides nothing; a
    // leader leaves the node to its heartbeat timeout, counted once the
    // leadership is confirmed again (ForgiveSilence), unless the agent
    // rejoins first and carries on in its round.
    if (gate->leads()) {
      MUSTER_LOG(INFO) << "session " << id_ << " from " << peer_
                       << " ended while musterd could not confirm its "
                          "leadership: its node is left to its rejoin or its "
                          "heartbeat timeout";
    }
    // told_gone_ stays false: what this stream sent before it ended and is
    // held is still acted on when replayed.
    return;
  }
  auto tell = [self = shared_from_this()] {
    absl::MutexLock lock(&self->events_mu_);
    if (self->told_gone_) return;
    self->told_gone_ = true;
    if (self->joined_) self->service_->coordinator_->OnDisconnect(self->id_);
  };
  if (gate != nullptr && gate->leads() &&
      service_->inbox_.HoldIfFenced([&] { return tell; })) {
    return;  // after the events of this stream that wait before it
  }
  tell();
}

}  // namespace muster::rendezvous
