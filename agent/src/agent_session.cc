// The agent's session with the rendezvous server: connecting, reconnecting
// after a loss, the round it claims on rejoining (a restarted musterd
// re-adopts it) and lease fencing (agent/src/lease_fence.h).
#include <algorithm>

#include "absl/time/time.h"
#include "agent/src/elastic_agent_impl.h"
#include "muster/common/logging.h"
#include "muster/platform/signals.h"

namespace muster::agent {

using platform::kSignalTerminate;

rendezvous::GrpcClientOptions ElasticAgent::Impl::ClientOptions(
    absl::Duration connect_timeout) {
  rendezvous::GrpcClientOptions options;
  options.endpoint = endpoint_;
  options.connect_timeout = connect_timeout;
  options.heartbeat_interval = config_.heartbeat_interval;
  options.follow_server_heartbeat_interval = !config_.heartbeat_interval_fixed;
  options.lease = fence_->lease();
  options.security = security_;
  options.replicas = replicas_;
  LeaseFence* fence = fence_.get();
  options.lease_seq = [fence] { return fence->NextSeq(); };
  options.on_lease_renewed = [fence](int64_t seq) { fence->OnRenewed(seq); };
  options.fill_heartbeat = [progress = progress_](v1::Heartbeat* heartbeat) {
    progress->Fill(heartbeat);
  };
  options.on_capture_stacks = [stacks = stacks_](const v1::CaptureStacks& r) {
    return stacks->Capture(r.timeout_ms() > 0
                               ? absl::Milliseconds(r.timeout_ms())
                               : absl::Seconds(8));
  };
  return options;
}

std::unique_ptr<rendezvous::RendezvousClient> ElasticAgent::Impl::NewClient(
    absl::Duration connect_timeout) {
  const rendezvous::GrpcClientOptions options = ClientOptions(connect_timeout);
  if (new_client_) return new_client_(options);
  if (local_ != nullptr) return local_->NewClient();
  return rendezvous::NewGrpcRendezvousClient(options);
}

bool ElasticAgent::Impl::AwaitLease() {
  if (local_ != nullptr) return true;  // in process: nothing to fence
  // Usually the RoundReady itself renewed the lease (its lease_seq, applied
  // by the client before Next returned it), or an older musterd renewed it
  // while this agent waited. Enough: a renewal interval (lease/4) before the
  // fence.
  const absl::Duration enough = fence_->lease() / 4;
  if (fence_->LastsFor(enough)) return true;
  // Else (an older musterd, a long-delayed RoundReady) a heartbeat now, and
  // its renewal, up to 0.3 lease.
  client_->HeartbeatNow();
  const absl::Time until = clock_->Now() + fence_->lease() * 3 / 10;
  while (!fence_->LastsFor(enough) && clock_->Now() < until)
    clock_->SleepFor(absl::Milliseconds(2));
  return !fence_->armed() || !fence_->FenceDue();
}

v1::Join ElasticAgent::Impl::JoinWithClaim() const {
  v1::Join join = join_;
  join.set_recovery_in_place(in_place());
  if (round_.round() > 0) {
    v1::RoundClaim* claim = join.mutable_claim();
    *claim->mutable_round() = round_;
    claim->mutable_round()->clear_peers();
    // Kept workers run too: their lease is renewed while the next round forms
    // (lease.h), or the fence would stop them.
    claim->set_workers_running(
        group_ != nullptr &&
        (state_ == AgentState::kRunning || state_ == AgentState::kKeeping));
    claim->set_reported(state_ == AgentState::kReported &&
                        last_report_.has_value());
  }
  if (state_ == AgentState::kKeeping && group_ != nullptr) {
    // --recovery=in-place: musterd places this node before the newcomers, in
    // the order of its previous rank offset.
    v1::KeptWorkers* kept = join.mutable_kept();
    kept->set_round(round_.round());
    kept->set_group_rank(round_.group_rank());
    kept->set_rank_offset(round_.rank_offset());
  }
  return join;
}

void ElasticAgent::Impl::FenceWorkers() {
  MUSTER_LOG(ERROR)
      << "lease fence: musterd has not renewed this node's lease for "
      << absl::FormatDuration(
             absl::Trunc(clock_->Now() - (fence_->LeaseEnd() - fence_->lease()),
                         absl::Milliseconds(1)))
      << " (lease_timeout " << absl::FormatDuration(fence_->lease())
      << "); stopping the workers of round " << round_.round()
      << " before it could give their ranks to another round";
  if (group_ != nullptr) group_->Stop(kSignalTerminate, fence_->FenceGrace());
  ReleaseGroup();
}

bool ElasticAgent::Impl::ResumeSession(const std::string& why) {
  MUSTER_LOG(WARNING) << why;
  // A session that got a message or lasted a while ended for a new
  // reason (the server went away): a fresh reconnect window.
  constexpr absl::Duration kQuickEnd = absl::Seconds(2);
  if (session_got_message_ || clock_->Now() - session_started_ > kQuickEnd) {
    unavailable_since_ = absl::InfiniteFuture();
  }
  if (unavailable_since_ == absl::InfiniteFuture()) {
    unavailable_since_ = clock_->Now();
    unavailable_backoff_ = absl::Milliseconds(100);
  } else {
    // The last reconnect worked and the server ended the session again:
    // back off here too, or the two would loop as fast as they can.
    clock_->SleepFor(std::min(
        unavailable_backoff_,
        std::max(
            absl::ZeroDuration(),
            unavailable_since_ + config_.reconnect_timeout - clock_->Now())));
    unavailable_backoff_ = std::min(unavailable_backoff_ * 2, absl::Seconds(1));
  }
  reconnecting_ = true;
  const bool resumed =
      Reconnect(unavailable_since_ + config_.reconnect_timeout);
  reconnecting_ = false;
  if (!resumed) return false;
  session_started_ = clock_->Now();
  session_got_message_ = false;
  return true;
}

void ElasticAgent::Impl::StartPump() {
  pump_ = std::make_unique<SessionPump>(client_.get(), inbox_.get());
}

void ElasticAgent::Impl::EndSession(absl::string_view leave_reason) {
  // The pump first: what the closed client then says is not the server's.
  if (pump_ != nullptr) pump_->RequestStop();
  if (client_ != nullptr) client_->Close(leave_reason);
  pump_.reset();
  client_.reset();
}

absl::Status ElasticAgent::Impl::SendJoin() {
  v1::AgentMessage msg;
  *msg.mutable_join() = JoinWithClaim();
  return client_->Send(msg);
}

bool ElasticAgent::Impl::Reconnect(absl::Time deadline) {
  // The in-process rendezvous ends a session only when it shuts down.
  if (local_ != nullptr) return false;
  MUSTER_LOG(WARNING)
      << "reconnecting to the rendezvous server at " << endpoint_
      << " for up to "
      << absl::FormatDuration(absl::Ceil(
             std::max(absl::ZeroDuration(), deadline - clock_->Now()),
             absl::Seconds(1)))
      << (group_ != nullptr ? "; the workers keep running" : "");
  EndSession("");
  absl::Duration backoff = absl::Milliseconds(50);
  int attempts = 0;
  while (clock_->Now() < deadline) {
    if (stop_signal_.load() != 0) return false;
    ++attempts;
    // Lease fencing: a connect attempt ends before the fence is due, and the
    // fence is checked between attempts (Decide: the workers stopped, no
    // second reconnect).
    if (FenceDue()) {
      AgentEvent fence;
      fence.kind = EventKind::kFenceDue;
      Dispatch(std::move(fence));
    }
    // With replicas the client paces its own passes over them (a second
    // each at most): 3 s lets a pass reach every replica of three, and a stop
    // signal is still seen within that.
    absl::Duration connect =
        std::min(several_replicas_ ? absl::Seconds(3) : absl::Seconds(1),
                 deadline - clock_->Now());
    if (group_ != nullptr && fence_->armed()) {
      connect = std::max(absl::Milliseconds(50),
                         std::min(connect, fence_->FenceAt() - clock_->Now()));
    }
    auto client = NewClient(connect);
    absl::Status s = client->Start(JoinWithClaim());
    if (s.ok()) {
      client_ = std::move(client);
      StartPump();
      if (attempt_ >= 0) client_->SetRound(round_.round());
      MUSTER_LOG(INFO) << "reconnected to " << endpoint_ << " after "
                       << attempts
                       << (attempts == 1 ? " attempt" : " attempts");
      return true;
    }
    MUSTER_LOG(DEBUG) << "reconnect attempt " << attempts << ": "
                      << s.message();
    clock_->SleepFor(std::min(
        backoff, std::max(absl::ZeroDuration(), deadline - clock_->Now())));
    // While workers run, their lease is running out: try at least twice a
    // second (a musterd restarted in 0.3 s is found at once). With replicas
    // the client already paced its passes over them (every 250 ms, see
    // replica_client.cc): a new leader's election is the wait, and the fence
    // leaves little beyond it (docs/architecture.md, "Following the leader").
    const absl::Duration cap = several_replicas_   ? absl::Milliseconds(100)
                               : group_ != nullptr ? absl::Milliseconds(500)
                                                   : absl::Seconds(1);
    backoff = std::min(backoff * 2, cap);
  }
  MUSTER_LOG(ERROR) << "could not rejoin through the rendezvous server at "
                    << endpoint_ << " within "
                    << absl::FormatDuration(config_.reconnect_timeout) << " ("
                    << attempts << " attempts)";
  return false;
}

}  // namespace muster::agent
