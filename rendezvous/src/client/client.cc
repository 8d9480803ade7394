#include "muster/rendezvous/client.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "muster/common/logging.h"
#include "muster/common/net.h"
#include "muster/rendezvous/heartbeat_budget.h"
#include "muster/store/grpc_security.h"
#include "muster/store/grpc_status.h"
#include "muster/v1/rendezvous.grpc.pb.h"
#include "rendezvous/src/client/session_client.h"
#include "rendezvous/src/client/session_inbox.h"

namespace muster::rendezvous {
namespace {

constexpr int kDefaultRendezvousPort = 29400;
// How long Close waits for the server to end the stream after the agent
// half-closed it.
constexpr absl::Duration kCloseWait = absl::Seconds(1);

// The agent's Session stream over gRPC's sync API: a reader thread moves server
// messages into `inbox_` (Next takes them), a heartbeat thread writes
// Heartbeat{round} every interval, and writes are serialised by `writing_` (the
// gRPC Write itself runs outside mu_, so Close can give up on a stuck write and
// cancel the call). Every thread is joined by Close, which the destructor
// calls.
//
// How the session ends, as Next reports it after the queued messages:
//   the server ended it with an error     that status, with the server's
//   message
//                                         (FAILED_PRECONDITION /
//                                         INVALID_ARGUMENT for a refused Join);
//   the connection broke, the server went UNAVAILABLE "lost the rendezvous
//   server at H:P: ..."; away or cancelled the stream the server ended it with
//   OK (after    OUT_OF_RANGE "the rendezvous server at H:P ended the
//   JobSucceeded / JobFailed)             session";
//   this agent called Close               CANCELLED.
class GrpcRendezvousClient final : public SessionClient {
 public:
  GrpcRendezvousClient(GrpcClientOptions options, store::ChannelWait wait)
      : options_(std::move(options)),
        wait_(wait),
        interval_us_(absl::ToInt64Microseconds(options_.heartbeat_interval)) {}

  ~GrpcRendezvousClient() override { Close(""); }

  absl::Status Start(const v1::Join& join) override {
    {
      absl::MutexLock lock(&mu_);
      if (state_ != State::kNew) {
        return absl::FailedPreconditionError(
            "RendezvousClient::Start was called twice");
      }
      state_ = State::kStarting;
    }
    absl::StatusOr<HostPort> target =
        ParseHostPort(options_.endpoint, kDefaultRendezvousPort);
    if (!target.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad rendezvous endpoint: ", target.status().message()));
    }
    if (target->host.empty()) target->host = "127.0.0.1";
    target_ = *target;
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        store::NewSecureMusterChannel(target_, options_.security);
    if (!channel.ok()) return channel.status();
    channel_ = *std::move(channel);
    absl::Status connected = store::WaitForChannel(
        *channel_, target_, "rendezvous server", options_.connect_timeout,
        wait_, options_.security.tls());
    if (!connected.ok()) return connected;
    stub_ = v1::Rendezvous::NewStub(channel_);

    {
      absl::MutexLock lock(&mu_);
      if (closing_)
        return absl::CancelledError("the client was closed while starting");
      // Opening the stream sends its headers; it does not wait for the server's
      // answer.
      stream_ = stub_->Session(&context_);
      state_ = State::kOpen;
    }
    reader_ = std::thread([this] { ReadLoop(); });

    v1::AgentMessage msg;
    *msg.mutable_join() = join;
    if (options_.lease_seq)
      msg.mutable_join()->set_lease_seq(options_.lease_seq());
    absl::Status sent = Write(msg);
    if (!sent.ok()) {
      // The stream broke at once: report how it ended, if the reader learns it
      // soon.
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(
              absl::Condition(this, &GrpcRendezvousClient::Ended),
              kCloseWait)) {
        return inbox_.end();
      }
      return sent;
    }
    heartbeat_ = std::thread([this] { HeartbeatLoop(); });
    MUSTER_LOG(DEBUG) << "session with the rendezvous server at "
                      << target_.ToString() << " open; joined job '"
                      << join.job_id() << "' as node '" << join.node_id()
                      << "'";
    return absl::OkStatus();
  }

  absl::Status Send(const v1::AgentMessage& msg) override {
    {
      absl::MutexLock lock(&mu_);
      if (state_ == State::kNew || state_ == State::kStarting) {
        return absl::FailedPreconditionError(
            "RendezvousClient::Send before Start succeeded");
      }
    }
    return Write(msg);
  }

  absl::StatusOr<v1::ServerMessage> Next(absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    if (state_ == State::kNew || state_ == State::kStarting) {
      return absl::FailedPreconditionError(
          "RendezvousClient::Next before Start succeeded");
    }
    mu_.AwaitWithTimeout(absl::Condition(this, &GrpcRendezvousClient::HasNext),
                         timeout);
    if (auto next = inbox_.Take()) return *std::move(next);
    return absl::DeadlineExceededError(absl::StrCat(
        "no message from the rendezvous server at ", target_.ToString(),
        " within ", absl::FormatDuration(timeout)));
  }

  void SetRound(int64_t round) override { round_.store(round); }

  void HeartbeatNow() override {
    absl::MutexLock lock(&mu_);
    beat_now_ = true;
  }

  std::string leader() const override {
    absl::MutexLock lock(&mu_);
    return leader_;
  }

  // Marks the session closing (the heartbeat stops); false when it already
  // was. *open: whether the stream was open then.
  bool StartClosing(bool* open) {
    absl::MutexLock lock(&mu_);
    if (closing_) return false;
    closing_ = true;
    stop_heartbeat_ = true;
    *open = state_ == State::kOpen;
    return true;
  }

  void Abandon() override {
    bool open = false;
    if (!StartClosing(&open)) return;
    // A cancel ends a write or read stuck on a silent server too.
    if (open) context_.TryCancel();
    if (reader_.joinable()) reader_.join();
    if (heartbeat_.joinable()) heartbeat_.join();
    if (capture_.joinable()) capture_.join();
    absl::MutexLock lock(&mu_);
    inbox_.End(absl::CancelledError("the session was abandoned by this agent"));
    state_ = State::kClosed;
  }

  void CloseWith(const v1::Leave& leave) override {
    bool open = false;
    if (!StartClosing(&open)) return;
    if (open) {
      const absl::Time deadline = absl::Now() + kCloseWait;
      bool may_write = false;
      {
        absl::MutexLock lock(&mu_);
        // A write stuck for a second (a frozen server) is abandoned: the cancel
        // below ends it.
        may_write = mu_.AwaitWithDeadline(
                        absl::Condition(this, &GrpcRendezvousClient::WriteIdle),
                        deadline) &&
                    !inbox_.ended();
        if (may_write) writing_ = true;
      }
      if (may_write) {
        if (!leave.reason().empty()) {
          v1::AgentMessage msg;
          *msg.mutable_leave() = leave;
          stream_->Write(msg);
        }
        stream_->WritesDone();
        absl::MutexLock lock(&mu_);
        writing_ = false;
        writes_done_ = true;
      }
      {
        // The server ends the stream once it sees the half-close.
        absl::MutexLock lock(&mu_);
        mu_.AwaitWithDeadline(
            absl::Condition(this, &GrpcRendezvousClient::Ended), deadline);
      }
      context_.TryCancel();
    }
    if (reader_.joinable()) reader_.join();
    if (heartbeat_.joinable()) heartbeat_.join();
    if (capture_.joinable()) capture_.join();
    absl::MutexLock lock(&mu_);
    inbox_.End(absl::CancelledError("the session was closed by this agent"));
    state_ = State::kClosed;
  }

 private:
  enum class State { kNew, kStarting, kOpen, kClosed };

  bool HasNext() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return inbox_.HasNext();
  }
  bool Ended() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return inbox_.ended();
  }
  bool WriteIdle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !writing_;
  }
  bool HeartbeatWanted() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_heartbeat_ || beat_now_;
  }

  // One message on the stream, after any write in progress. UNAVAILABLE once
  // the stream is over.
  absl::Status Write(const v1::AgentMessage& msg) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &GrpcRendezvousClient::WriteIdle));
      if (writes_done_ || inbox_.ended()) return Broken();
      writing_ = true;
    }
    bool ok = stream_->Write(msg);
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) return Broken();
    return absl::OkStatus();
  }

  absl::Status Broken() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (closing_)
      return absl::UnavailableError("the session was closed by this agent");
    return absl::UnavailableError(absl::StrCat("lost the rendezvous server at ",
                                               target_.ToString(),
                                               ": the session is over"));
  }

  void ReadLoop() {
    v1::ServerMessage msg;
    while (stream_->Read(&msg)) {
      FollowHeartbeatBudget(msg);
      // Lease fencing: a RoundReady renews the lease (its lease_seq) before
      // Next hands it over, so the agent starts its workers under it.
      if (msg.has_round_ready() && msg.round_ready().lease_seq() != 0 &&
          options_.on_lease_renewed)
        options_.on_lease_renewed(msg.round_ready().lease_seq());
      if (msg.has_capture_stacks()) {  // `muster stacks`: not for Next
        StartCapture(msg.capture_stacks());
        msg.Clear();
        continue;
      }
      if (msg.has_lease_renewed()) {  // lease fencing: not for Next
        if (options_.on_lease_renewed)
          options_.on_lease_renewed(msg.lease_renewed().seq());
        msg.Clear();
        continue;
      }
      absl::MutexLock lock(&mu_);
      inbox_.Push(std::move(msg));
      msg.Clear();
    }
    grpc::Status status = stream_->Finish();
    absl::MutexLock lock(&mu_);
    // A standby replica's refusal names the leader (service/leader_gate.h).
    leader_ = store::LeaderFromTrailers(context_);
    inbox_.End(EndStatus(status));
    MUSTER_LOG(DEBUG) << "session with " << target_.ToString()
                      << " ended: " << inbox_.end();
  }

  absl::Status EndStatus(const grpc::Status& status) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string where = target_.ToString();
    if (closing_ &&
        (status.ok() || status.error_code() == grpc::StatusCode::CANCELLED)) {
      return absl::CancelledError("the session was closed by this agent");
    }
    if (status.ok()) {
      return absl::OutOfRangeError(absl::StrCat("the rendezvous server at ",
                                                where, " ended the session"));
    }
    switch (status.error_code()) {
      case grpc::StatusCode::UNAVAILABLE:
      case grpc::StatusCode::CANCELLED:
      case grpc::StatusCode::UNKNOWN:
      case grpc::StatusCode::INTERNAL:
        return absl::UnavailableError(
            absl::StrCat("lost the rendezvous server at ", where, ": ",
                         status.error_message()));
      default:
        return store::FromGrpcStatus(status);
    }
  }

  // The heartbeat budget: the server's suggested interval, when this agent
  // follows it. Only from the reader thread.
  void FollowHeartbeatBudget(const v1::ServerMessage& msg) {
    if (!options_.follow_server_heartbeat_interval) return;
    int64_t suggested_ms = 0;
    switch (msg.kind_case()) {
      case v1::ServerMessage::kWaiting:
        suggested_ms = msg.waiting().heartbeat_interval_ms();
        break;
      case v1::ServerMessage::kRoundReady:
        suggested_ms = msg.round_ready().heartbeat_interval_ms();
        break;
      case v1::ServerMessage::kLeaseRenewed:
        suggested_ms = msg.lease_renewed().heartbeat_interval_ms();
        break;
      default:
        return;
    }
    if (suggested_ms <= 0) return;  // an older server: keep the interval
    const absl::Duration interval =
        FollowedHeartbeatInterval(options_.heartbeat_interval, options_.lease,
                                  absl::Milliseconds(suggested_ms));
    const int64_t us = absl::ToInt64Microseconds(interval);
    if (interval_us_.exchange(us) != us) {
      MUSTER_LOG(DEBUG) << "heartbeat interval now "
                        << absl::FormatDuration(interval)
                        << " (the server's heartbeat budget suggests "
                        << suggested_ms << "ms)";
    }
  }

  // `muster stacks`: the capture runs on a thread of its own (it takes up to
  // the request's timeout, and the reader must go on reading) and its report
  // is written like any message. One at a time: a request that comes while
  // one runs is answered at once with an error. Only from the reader thread.
  void StartCapture(const v1::CaptureStacks& request) {
    v1::AgentMessage msg;
    msg.mutable_stacks_report()->set_request_id(request.request_id());
    if (!options_.on_capture_stacks) {
      msg.mutable_stacks_report()->set_error(
          "this agent cannot read its workers' stacks");
      (void)Write(msg);
      return;
    }
    if (capturing_.exchange(true)) {
      msg.mutable_stacks_report()->set_error(
          "a capture of this agent's stacks is already running");
      (void)Write(msg);
      return;
    }
    if (capture_.joinable()) capture_.join();  // the last one, finished
    capture_ = std::thread([this, request] {
      v1::AgentMessage report;
      *report.mutable_stacks_report() = options_.on_capture_stacks(request);
      report.mutable_stacks_report()->set_request_id(request.request_id());
      capturing_.store(false);
      (void)Write(report);
    });
  }

  void HeartbeatLoop() {
    absl::MutexLock lock(&mu_);
    while (!stop_heartbeat_) {
      mu_.AwaitWithTimeout(
          absl::Condition(this, &GrpcRendezvousClient::HeartbeatWanted),
          absl::Microseconds(interval_us_.load()));
      if (stop_heartbeat_) break;
      beat_now_ = false;  // HeartbeatNow: this one, then on the interval
      v1::AgentMessage msg;
      msg.mutable_heartbeat()->set_round(round_.load());
      mu_.Unlock();
      if (options_.lease_seq)
        msg.mutable_heartbeat()->set_seq(options_.lease_seq());
      if (options_.fill_heartbeat)
        options_.fill_heartbeat(msg.mutable_heartbeat());
      absl::Status sent = Write(msg);
      mu_.Lock();
      if (!sent.ok()) break;  // the stream is over; the reader reports how
    }
  }

  const GrpcClientOptions options_;
  const store::ChannelWait wait_;
  // Set by Start before any other thread exists, constant afterwards.
  HostPort target_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::ServerMessage>>
      stream_;
  std::thread reader_;
  std::thread heartbeat_;
  std::thread capture_;  // StartCapture; joined by Close
  std::atomic<bool> capturing_{false};
  std::atomic<int64_t> round_{0};
  // The heartbeat interval in use, us (options_.heartbeat_interval, or what
  // the heartbeat budget made of it).
  std::atomic<int64_t> interval_us_;

  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kNew;
  // The server's messages, and how the session ended once it has.
  SessionInbox inbox_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_done_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_heartbeat_ ABSL_GUARDED_BY(mu_) = false;
  bool beat_now_ ABSL_GUARDED_BY(mu_) = false;  // HeartbeatNow
  // The leader a standby named when it ended the stream (muster-leader).
  std::string leader_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<SessionClient> NewSessionClient(GrpcClientOptions options,
                                                store::ChannelWait wait) {
  return std::make_unique<GrpcRendezvousClient>(std::move(options), wait);
}

}  // namespace muster::rendezvous
