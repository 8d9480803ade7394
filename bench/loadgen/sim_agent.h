// One simulated agent of muster-loadgen: a real Session stream on gRPC's async
// API, driven by the completion queue its shard (shard.h) gives it. Header
// only; every process of the load generator runs the same agents.
#ifndef MUSTER_BENCH_LOADGEN_SIM_AGENT_H_
#define MUSTER_BENCH_LOADGEN_SIM_AGENT_H_

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "muster/rendezvous/defaults.h"
#include "muster/rendezvous/heartbeat_budget.h"
#include "muster/v1/rendezvous.grpc.pb.h"

namespace muster::loadgen {

using Stream =
    grpc::ClientAsyncReaderWriter<v1::AgentMessage, v1::ServerMessage>;

// The agent's default interval (agent/include/muster/agent/config.h): a
// heartbeat every 250 ms (--heartbeat-ms changes it). Its default timeout is 4
// intervals (1 s); the simulated agents ask for 10 s instead: the load
// generator does the client side of every agent on the same machine as
// musterd, which costs about as much CPU per heartbeat as musterd's side, and
// on a shared 2-core machine its own lag (printed as
// loadgen_heartbeat_lag_max_ms) would otherwise make musterd drop agents that
// a real node would have kept alive.
constexpr absl::Duration kHeartbeatInterval = absl::Milliseconds(250);
constexpr absl::Duration kHeartbeatTimeout = absl::Seconds(10);

// How the simulated agents heartbeat: like the agent, every `interval`, or
// what the server's heartbeat budget makes of it (follow); each heartbeat and
// the Join carry a lease seq, as the agent's do, and the Join says that
// RoundReady renews the lease (Join.lease_from_round_ready), so musterd
// renews leases as it would for real agents: only once in the round.
struct HeartbeatPolicy {
  absl::Duration interval = kHeartbeatInterval;
  bool follow = true;
  absl::Duration lease = rendezvous::kDefaultLease;
  bool lease_set = false;  // else the Join asks for none: the server's default
};

// Counters a shard's main thread waits on (shard.cc also keeps its parent's
// commands under `mu`, so that one wait ends on either).
struct Progress {
  absl::Mutex mu;
  int64_t ready[3] ABSL_GUARDED_BY(mu) = {0, 0, 0};  // RoundReady of round r
  int64_t restarts ABSL_GUARDED_BY(mu) = 0;
  int64_t finished ABSL_GUARDED_BY(mu) = 0;  // streams done (Finish)
  int64_t errors ABSL_GUARDED_BY(mu) = 0;    // streams ended with an error
  int64_t verdicts ABSL_GUARDED_BY(mu) = 0;  // JobSucceeded / JobFailed
  std::string first_error ABSL_GUARDED_BY(mu);
};

// One simulated agent: one Session stream on one completion queue. Writes go
// one at a time (gRPC allows one in flight); the rest queue. The queue's
// thread calls OnEvent with the operation that completed (the tag's low bits).
class SimAgent {
 public:
  enum Op : uintptr_t { kStarted = 0, kRead = 1, kWritten = 2, kFinished = 3 };

  SimAgent(int index, v1::Join join, Progress* progress,
           grpc::CompletionQueue* cq, const HeartbeatPolicy* policy)
      : index_(index),
        join_(std::move(join)),
        progress_(progress),
        cq_(cq),
        policy_(policy),
        interval_us_(absl::ToInt64Microseconds(policy->interval)) {}

  // Dispatches a completion-queue event to its agent.
  static void Dispatch(void* tag, bool ok) {
    const uintptr_t bits = reinterpret_cast<uintptr_t>(tag);
    reinterpret_cast<SimAgent*>(bits & ~uintptr_t{3})
        ->OnEvent(static_cast<Op>(bits & 3), ok);
  }

  void Start(v1::Rendezvous::Stub* stub) {
    absl::MutexLock lock(&mu_);
    stream_ = stub->PrepareAsyncSession(&context_, cq_);
    join_sent_ = absl::Now();
    // The Join is the first write, once the call has started.
    queue_.push_back(JoinMessage());
    write_in_flight_ = true;
    stream_->StartCall(Tag(kStarted));
  }

  // Writes (or queues) a heartbeat if one is due at `now` on this agent's
  // schedule; returns whether it did.
  bool HeartbeatIfDue(absl::Time now) {
    absl::MutexLock lock(&mu_);
    if (stream_ == nullptr || closing_) return false;
    const absl::Duration interval = this->interval();
    if (next_heartbeat_ == absl::InfinitePast()) next_heartbeat_ = now;
    if (now < next_heartbeat_) return false;
    // On schedule, not from now (the caller's visits jitter); a generator
    // that fell far behind starts afresh instead of bursting.
    next_heartbeat_ = std::max(next_heartbeat_ + interval, now - interval);
    v1::AgentMessage msg;
    msg.mutable_heartbeat()->set_round(round_);
    msg.mutable_heartbeat()->set_seq(++seq_);
    WriteLocked(std::move(msg));
    return true;
  }

  absl::Duration interval() const {
    return absl::Microseconds(interval_us_.load(std::memory_order_relaxed));
  }

  void Succeed() {
    absl::MutexLock lock(&mu_);
    if (stream_ == nullptr || closing_) return;
    v1::AgentMessage msg;
    msg.mutable_workers_succeeded()->set_round(round_);
    WriteLocked(std::move(msg));
  }

  // Ends this agent's stream as a crashed agent's would end.
  void Kill() { context_.TryCancel(); }

  absl::Time join_sent() {
    absl::MutexLock lock(&mu_);
    return join_sent_;
  }
  absl::Time ready_at(int slot) {
    absl::MutexLock lock(&mu_);
    return ready_at_[slot];
  }
  absl::Time restart_at() {
    absl::MutexLock lock(&mu_);
    return restart_at_;
  }
  const std::string& job_id() const { return join_.job_id(); }

 private:
  void* Tag(Op op) {
    return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(this) | op);
  }

  void OnEvent(Op op, bool ok) {
    switch (op) {
      case kStarted: {
        absl::MutexLock lock(&mu_);
        write_in_flight_ = false;
        if (!ok) {
          closing_ = true;
          queue_.clear();
          MaybeFinishLocked();
          return;
        }
        stream_->Read(&in_, Tag(kRead));
        NextWriteLocked();
        return;
      }
      case kWritten: {
        absl::MutexLock lock(&mu_);
        write_in_flight_ = false;
        if (!ok) queue_.clear();
        if (closing_) {
          queue_.clear();
          MaybeFinishLocked();
        } else {
          NextWriteLocked();
        }
        return;
      }
      case kRead:
        OnRead(ok);
        return;
      case kFinished:
        OnFinished();
        return;
    }
  }

  void OnRead(bool ok) {
    if (!ok) {
      // The stream ended (the server closed it, or Kill): collect its status.
      absl::MutexLock lock(&mu_);
      closing_ = true;
      MaybeFinishLocked();
      return;
    }
    const absl::Time now = absl::Now();
    bool rejoin = false;
    FollowHeartbeatBudget();
    switch (in_.kind_case()) {
      case v1::ServerMessage::kRoundReady: {
        int slot;
        {
          absl::MutexLock lock(&mu_);
          round_ = in_.round_ready().round();
          ++readies_;
          slot = std::min(readies_, 2);
          ready_at_[slot] = now;
        }
        absl::MutexLock lock(&progress_->mu);
        ++progress_->ready[slot];
        break;
      }
      case v1::ServerMessage::kRestart: {
        {
          absl::MutexLock lock(&mu_);
          restart_at_ = now;
        }
        rejoin = true;
        absl::MutexLock lock(&progress_->mu);
        ++progress_->restarts;
        break;
      }
      case v1::ServerMessage::kJobSucceeded:
      case v1::ServerMessage::kJobFailed: {
        absl::MutexLock lock(&progress_->mu);
        ++progress_->verdicts;
        if (in_.has_job_failed() && progress_->first_error.empty())
          progress_->first_error = in_.job_failed().root_cause();
        break;
      }
      default:
        break;
    }
    absl::MutexLock lock(&mu_);
    // A real agent stops its workers, then joins the next round.
    if (rejoin && !closing_) WriteLocked(JoinMessage());
    stream_->Read(&in_, Tag(kRead));
  }

  void OnFinished() {
    absl::MutexLock lock(&progress_->mu);
    ++progress_->finished;
    if (!status_.ok() && status_.error_code() != grpc::StatusCode::CANCELLED) {
      if (progress_->errors++ == 0)
        progress_->first_error = absl::StrCat(
            "agent ", index_, ": ", status_.error_message(), " (code ",
            static_cast<int>(status_.error_code()), ")");
    }
  }

  // As the agent's client does (rendezvous/src/client/client.cc).
  void FollowHeartbeatBudget() {
    if (!policy_->follow) return;
    int64_t ms = 0;
    if (in_.has_waiting()) ms = in_.waiting().heartbeat_interval_ms();
    if (in_.has_round_ready()) ms = in_.round_ready().heartbeat_interval_ms();
    if (in_.has_lease_renewed())
      ms = in_.lease_renewed().heartbeat_interval_ms();
    if (ms <= 0) return;
    interval_us_.store(
        absl::ToInt64Microseconds(rendezvous::FollowedHeartbeatInterval(
            policy_->interval, policy_->lease, absl::Milliseconds(ms))),
        std::memory_order_relaxed);
  }

  v1::AgentMessage JoinMessage() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    v1::AgentMessage msg;
    *msg.mutable_join() = join_;
    msg.mutable_join()->set_lease_seq(++seq_);
    return msg;
  }

  void WriteLocked(v1::AgentMessage msg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    queue_.push_back(std::move(msg));
    if (!write_in_flight_) NextWriteLocked();
  }

  void NextWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (queue_.empty()) return;
    // Write serialises the message before it returns.
    write_in_flight_ = true;
    stream_->Write(queue_.front(), Tag(kWritten));
    queue_.pop_front();
  }

  // Finish once the reads are over and no write is in flight (gRPC allows
  // nothing else on the stream after it).
  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finish_called_ || write_in_flight_ || !closing_) return;
    finish_called_ = true;
    stream_->Finish(&status_, Tag(kFinished));
  }

  const int index_;
  const v1::Join join_;
  Progress* const progress_;
  grpc::CompletionQueue* const cq_;
  const HeartbeatPolicy* const policy_;
  std::atomic<int64_t> interval_us_;  // written by the read path
  grpc::ClientContext context_;
  v1::ServerMessage in_;  // owned by the read path
  grpc::Status status_;   // written by Finish

  absl::Mutex mu_;
  std::unique_ptr<Stream> stream_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::AgentMessage> queue_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;  // the reads are over
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
  int64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t seq_ ABSL_GUARDED_BY(mu_) = 0;  // lease seq of Joins and heartbeats
  absl::Time next_heartbeat_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int readies_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time join_sent_ ABSL_GUARDED_BY(mu_);
  absl::Time ready_at_[3] ABSL_GUARDED_BY(mu_);
  absl::Time restart_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace muster::loadgen

#endif  // MUSTER_BENCH_LOADGEN_SIM_AGENT_H_
