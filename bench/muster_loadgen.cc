// muster-loadgen: N simulated agents against a real musterd, each a real
// Session stream, multiplexed over a few HTTP/2 connections with gRPC's
// async API (one completion queue per thread) in one process. It measures what
// the rendezvous costs at scale:
//
//   round_formed_s     first Join sent -> last RoundReady received
//   ready_p50_ms/p99   each agent's Join -> its RoundReady
//   form_cpu_s         CPU seconds musterd used from the first Join to the
//                      round ready (and form_cpu_us_per_join)
//   server_cpu_s       CPU seconds musterd used (/proc/PID/stat) over
//                      --seconds of heartbeats at the interval the server
//                      suggests (its heartbeat budget, as an agent follows
//                      it), or at --heartbeat-ms with --fixed-heartbeat
//   musterd_rss_mib    musterd's resident memory after the heartbeat phase
//   node_loss_*        one agent's stream closed -> every other agent of its
//                      job got Restart, and the next RoundReady (a replacement
//                      agent with a new node id joins at once, so the round
//                      re-forms at its full size)
//
//   muster-loadgen --endpoint=127.0.0.1:29400 --agents=10000 [--jobs=1]
//                  [--nproc=1] [--seconds=10] [--musterd-pid=PID]
//                  [--heartbeat-ms=250] [--heartbeat-timeout-ms=10000]
//                  [--fixed-heartbeat] [--lease-ms=0]
//
// Each job has agents/jobs nodes and min = max = that size, so its round
// closes the moment the last agent joins. Without --musterd-pid the server
// figures are skipped. Exit status 0 when every round formed and re-formed,
// 1 otherwise (the figures printed so far still stand).
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "muster/rendezvous/defaults.h"
#include "muster/rendezvous/heartbeat_budget.h"
#include "muster/v1/rendezvous.grpc.pb.h"

namespace muster::loadgen {
namespace {

using Stream =
    grpc::ClientAsyncReaderWriter<v1::AgentMessage, v1::ServerMessage>;

// The agent's default interval (agent/include/muster/agent/config.h): a
// heartbeat every 250 ms (--heartbeat-ms changes it). Its default timeout is 4
// intervals (1 s); the simulated agents ask for 10 s instead: this one process
// does the client side of every agent, which costs about as much CPU per
// heartbeat as musterd's side, and on a shared 2-core machine its own lag
// (printed as loadgen_heartbeat_lag_max_ms) would otherwise make musterd drop
// agents that a real node would have kept alive.
constexpr absl::Duration kHeartbeatInterval = absl::Milliseconds(250);
constexpr absl::Duration kHeartbeatTimeout = absl::Seconds(10);
// HTTP/2 connections the streams are spread over.
constexpr int kChannels = 16;
// Completion queues, each drained by its own thread. Not gRPC's callback API:
// it puts every stream of the process on one completion queue, and Debian's
// gRPC (built without NDEBUG) checks each completed operation against a list
// of every operation pending on its queue (cq_check_tag, a linear scan under
// the queue's lock), so each heartbeat cost O(agents) and 30,000 agents could
// not be driven. Here each queue holds agents/kQueues streams.
constexpr int kQueues = 32;

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

// Counters the main thread waits on.
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

// utime + stime of a process, in seconds; -1 when it cannot be read.
double ProcessCpuSeconds(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  // The command name (field 2) may hold spaces: fields are counted after ')'.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(text.substr(close + 2));
  std::string f;
  long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && (fields >> f); ++i) {
    if (i == 14) utime = std::stoll(f);
    if (i == 15) stime = std::stoll(f);
  }
  return static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
}

// A "VmRSS:" style line of /proc/PID/status, in MiB; -1 when absent.
double ProcessMemoryMib(int pid, const std::string& key) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      return std::stod(line.substr(key.size())) / 1024.0;  // kB
    }
  }
  return -1;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// Waits until done(progress) or the deadline; returns whether done.
template <typename Pred>
bool WaitFor(Progress& progress, absl::Duration timeout, Pred done) {
  absl::MutexLock lock(&progress.mu);
  return progress.mu.AwaitWithTimeout(absl::Condition(&done, &Pred::operator()),
                                      timeout);
}

// One channel (its own connection) per stub.
std::vector<std::unique_ptr<v1::Rendezvous::Stub>> MakeStubs(
    const std::string& endpoint) {
  std::vector<std::unique_ptr<v1::Rendezvous::Stub>> stubs;
  for (int i = 0; i < kChannels; ++i) {
    grpc::ChannelArguments args;
    // A distinct argument per channel: each gets its own connection.
    args.SetInt("muster.loadgen.channel", i);
    args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, -1);
    stubs.push_back(v1::Rendezvous::NewStub(grpc::CreateCustomChannel(
        endpoint, grpc::InsecureChannelCredentials(), args)));
  }
  return stubs;
}

// Heartbeats only, for `seconds`: their rate against the schedule, and
// musterd's CPU and memory meanwhile.
void MeasureHeartbeats(const std::vector<std::unique_ptr<SimAgent>>& sims,
                       int total, double seconds, int musterd_pid,
                       const std::atomic<int64_t>& heartbeats_sent) {
  const double c0 = musterd_pid > 0 ? ProcessCpuSeconds(musterd_pid) : 0.0;
  const int64_t b0 = heartbeats_sent.load();
  const absl::Time h0 = absl::Now();
  absl::SleepFor(absl::Seconds(seconds));
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - h0);
  const double beats = static_cast<double>(heartbeats_sent.load() - b0);
  // The schedule: each agent's interval (the server's, when following).
  double full_rate = 0;
  std::vector<double> interval_ms;
  for (int i = 0; i < total; ++i) {
    interval_ms.push_back(absl::ToDoubleMilliseconds(sims[i]->interval()));
    full_rate += 1000.0 / interval_ms.back();
  }
  std::printf(
      "heartbeat_interval_ms_min=%.0f\nheartbeat_interval_ms_max=%.0f\n",
      *std::min_element(interval_ms.begin(), interval_ms.end()),
      *std::max_element(interval_ms.begin(), interval_ms.end()));
  std::printf("heartbeats_per_s=%.0f\nheartbeats_per_s_scheduled=%.0f\n",
              beats / elapsed, full_rate);
  if (musterd_pid > 0) {
    const double used = ProcessCpuSeconds(musterd_pid) - c0;
    std::printf("heartbeat_s=%.1f\nserver_cpu_s=%.2f\n", elapsed, used);
    std::printf("server_cpu_per_s=%.3f\n", used / elapsed);
    if (beats > 0) {
      // musterd's CPU per heartbeat, and what the full schedule would cost
      // at that rate.
      const double us = used / beats * 1e6;
      std::printf("server_cpu_us_per_heartbeat=%.1f\n", us);
      std::printf("server_cpu_per_s_full_rate=%.3f\n", us * full_rate / 1e6);
    }
    std::printf("musterd_rss_mib=%.1f\nmusterd_peak_rss_mib=%.1f\n",
                ProcessMemoryMib(musterd_pid, "VmRSS:"),
                ProcessMemoryMib(musterd_pid, "VmHWM:"));
  }
  std::fflush(stdout);
}

// Kills agent `victim` of job 0 and starts a replacement (agent `total`,
// joining with `join`); whether job 0 formed its next round within
// form_timeout.
bool LoseNode(Progress& progress, std::vector<std::unique_ptr<SimAgent>>& sims,
              int victim, v1::Join join, grpc::CompletionQueue* queue,
              v1::Rendezvous::Stub* stub, std::atomic<int>& started,
              const HeartbeatPolicy* policy, absl::Duration form_timeout) {
  const int total = static_cast<int>(sims.size());
  int64_t restarts_before;
  {
    absl::MutexLock lock(&progress.mu);
    restarts_before = progress.restarts;
  }
  const std::string job0 = sims[0]->job_id();
  int job0_survivors = 0;
  for (int i = 0; i < total; ++i)
    job0_survivors += (i != victim && sims[i]->job_id() == job0);
  sims.push_back(std::make_unique<SimAgent>(total, std::move(join), &progress,
                                            queue, policy));
  const absl::Time k0 = absl::Now();
  sims[victim]->Kill();
  sims[total]->Start(stub);
  started.store(total + 1);
  const bool reformed = WaitFor(progress, form_timeout, [&] {
    return (progress.ready[2] >= job0_survivors &&
            progress.ready[1] >= total + 1) ||
           progress.verdicts > 0;
  });
  absl::Time last_restart = k0, last_ready2 = k0;
  for (int i = 0; i < total; ++i) {
    if (i == victim || sims[i]->job_id() != job0) continue;
    last_restart = std::max(last_restart, sims[i]->restart_at());
    last_ready2 = std::max(last_ready2, sims[i]->ready_at(2));
  }
  last_ready2 = std::max(last_ready2, sims[total]->ready_at(1));
  {
    absl::MutexLock lock(&progress.mu);
    std::printf("node_loss_restarts=%lld/%d\n",
                static_cast<long long>(progress.restarts - restarts_before),
                job0_survivors);
  }
  std::printf("node_loss_restart_s=%.3f\n",
              absl::ToDoubleSeconds(last_restart - k0));
  std::printf("node_loss_ready_s=%.3f%s\n",
              reformed ? absl::ToDoubleSeconds(last_ready2 - k0)
                       : absl::ToDoubleSeconds(form_timeout),
              reformed ? "" : " (not re-formed)");
  return reformed;
}

// The first round: how many agents were ready, how fast, and musterd's CPU
// meanwhile.
void ReportFormation(Progress& progress,
                     const std::vector<std::unique_ptr<SimAgent>>& sims,
                     absl::Time t0, bool formed, absl::Duration form_timeout,
                     double cpu_start, int musterd_pid, int jobs, int nproc,
                     const HeartbeatPolicy& policy) {
  const int total = static_cast<int>(sims.size());
  const absl::Duration heartbeat_interval = policy.interval;
  absl::Time last_ready = t0;
  std::vector<double> latency_ms;
  latency_ms.reserve(total);
  for (auto& s : sims) {
    const absl::Time r = s->ready_at(1);
    if (r == absl::Time()) continue;
    last_ready = std::max(last_ready, r);
    latency_ms.push_back(absl::ToDoubleMilliseconds(r - s->join_sent()));
  }
  const double cpu_formed =
      musterd_pid > 0 ? ProcessCpuSeconds(musterd_pid) : 0.0;
  std::printf(
      "agents=%d jobs=%d nproc=%d channels=%d queues=%d heartbeat_ms=%lld "
      "follow_server_interval=%d\n",
      total, jobs, nproc, kChannels, kQueues,
      static_cast<long long>(absl::ToInt64Milliseconds(heartbeat_interval)),
      policy.follow ? 1 : 0);
  int64_t ready1;
  {
    absl::MutexLock lock(&progress.mu);
    ready1 = progress.ready[1];
  }
  std::printf("rounds_ready=%lld/%d\n", static_cast<long long>(ready1), total);
  std::printf("round_formed_s=%.3f%s\n",
              formed ? absl::ToDoubleSeconds(last_ready - t0)
                     : absl::ToDoubleSeconds(form_timeout),
              formed ? "" : " (not formed: timed out or failed)");
  std::printf("ready_p50_ms=%.1f\nready_p99_ms=%.1f\n",
              Percentile(latency_ms, 0.50), Percentile(latency_ms, 0.99));
  if (musterd_pid > 0) {
    // musterd's CPU from the first join to the round ready (issue 39's
    // yardstick), and per join. (Results before 28 Nov name it
    // server_cpu_form_s.)
    const double form_cpu = cpu_formed - cpu_start;
    std::printf("form_cpu_s=%.2f\nform_cpu_us_per_join=%.1f\n", form_cpu,
                total > 0 ? form_cpu * 1e6 / total : 0.0);
  }
  std::fflush(stdout);
}

int Run(const std::string& endpoint, int agents, int jobs, int nproc,
        double seconds, int musterd_pid, const HeartbeatPolicy& policy,
        absl::Duration heartbeat_timeout) {
  const absl::Duration heartbeat_interval = policy.interval;
  const int per_job = agents / jobs;
  const std::string run = absl::StrCat("loadgen-", getpid());
  std::vector<std::unique_ptr<v1::Rendezvous::Stub>> stubs =
      MakeStubs(endpoint);

  std::vector<std::unique_ptr<grpc::CompletionQueue>> queues;
  std::vector<std::thread> queue_threads;
  for (int i = 0; i < kQueues; ++i) {
    queues.push_back(std::make_unique<grpc::CompletionQueue>());
    queue_threads.emplace_back([cq = queues.back().get()] {
      void* tag = nullptr;
      bool ok = false;
      while (cq->Next(&tag, &ok)) SimAgent::Dispatch(tag, ok);
    });
  }

  Progress progress;
  std::vector<std::unique_ptr<SimAgent>> sims;
  sims.reserve(agents + 1);
  auto make_join = [&](int job, const std::string& node_id) {
    v1::Join j;
    j.set_job_id(absl::StrCat(run, "-", job));
    j.set_node_id(node_id);
    j.set_hostname(node_id);
    j.set_advertised_addr("127.0.0.1");
    j.set_local_world_size(nproc);
    j.set_min_nodes(per_job);
    j.set_max_nodes(per_job);
    j.set_node_rank_hint(-1);
    j.set_max_restarts(0);
    j.set_master_port(30000 + static_cast<int>(sims.size() % 20000));
    j.set_join_timeout_ms(600'000);
    j.set_last_call_timeout_ms(30'000);
    j.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(heartbeat_interval));
    j.set_heartbeat_timeout_ms(absl::ToInt64Milliseconds(heartbeat_timeout));
    if (policy.lease_set)
      j.set_lease_timeout_ms(absl::ToInt64Milliseconds(policy.lease));
    j.set_lease_from_round_ready(true);  // as the agent does
    return j;
  };
  for (int i = 0; i < per_job * jobs; ++i) {
    sims.push_back(std::make_unique<SimAgent>(
        i, make_join(i % jobs, absl::StrCat("n", i)), &progress,
        queues[i % kQueues].get(), &policy));
  }
  const int total = static_cast<int>(sims.size());

  // Heartbeats: each agent is visited every --heartbeat-ms (its slot of 25)
  // and beats when its own schedule (the server's interval when following)
  // says so.
  std::atomic<bool> stop_heartbeats{false};
  std::atomic<int> started{0};
  // Heartbeats handed to gRPC: when the load generator falls behind its
  // schedule, fewer than agents x 1000/heartbeat_ms a second reach musterd,
  // and its CPU per heartbeat is the fair figure.
  std::atomic<int64_t> heartbeats_sent{0};
  // How far the heartbeat thread fell behind its schedule: over a second, and
  // the server's losses are the load generator's fault, not the server's.
  absl::Duration max_lag;
  std::thread heartbeats([&] {
    constexpr int kSlots = 25;
    int slot = 0;
    absl::Time next = absl::Now();
    while (!stop_heartbeats.load()) {
      next += heartbeat_interval / kSlots;
      const absl::Duration ahead = next - absl::Now();
      if (-ahead > max_lag) max_lag = -ahead;
      absl::SleepFor(ahead);
      const int n = started.load();
      const absl::Time now = absl::Now();
      int64_t sent = 0;
      for (int i = slot; i < n; i += kSlots)
        sent += sims[i]->HeartbeatIfDue(now);
      heartbeats_sent.fetch_add(sent, std::memory_order_relaxed);
      slot = (slot + 1) % kSlots;
    }
  });

  const double cpu_start =
      musterd_pid > 0 ? ProcessCpuSeconds(musterd_pid) : 0.0;
  const absl::Time t0 = absl::Now();
  for (int i = 0; i < total; ++i) {
    sims[i]->Start(stubs[i % kChannels].get());
    started.store(i + 1);
  }
  const absl::Duration form_timeout =
      absl::Seconds(60) + absl::Milliseconds(total);  // 60 s + 1 ms per agent
  WaitFor(progress, form_timeout, [&] {
    return progress.ready[1] >= total || progress.verdicts > 0 ||
           progress.finished > 0;
  });
  bool formed;
  {
    absl::MutexLock lock(&progress.mu);
    formed = progress.ready[1] >= total;  // not a lost agent's early end
  }
  ReportFormation(progress, sims, t0, formed, form_timeout, cpu_start,
                  musterd_pid, jobs, nproc, policy);
  bool ok = formed;

  if (formed) {
    MeasureHeartbeats(sims, total, seconds, musterd_pid, heartbeats_sent);

    // Node loss: agent 1 of job 0 (not its first joiner) dies; a replacement
    // with a new node id joins at once.
    const int victim = std::min(jobs, total - 1);  // job 0's second agent
    ok = ok && LoseNode(progress, sims, victim,
                        make_join(0, absl::StrCat("n", victim, "-replacement")),
                        queues[total % kQueues].get(), stubs[0].get(), started,
                        &policy, form_timeout);
  }

  // End: every agent reports success (the server closes each stream with the
  // verdict); whatever is left after 30 s is cancelled.
  // Heartbeats go on until the verdicts are in: a real agent beats until it
  // exits.
  const int all = static_cast<int>(sims.size());
  for (auto& s : sims) s->Succeed();
  WaitFor(progress, absl::Seconds(30),
          [&] { return progress.verdicts >= all - 1; });
  stop_heartbeats.store(true);
  heartbeats.join();
  std::printf("loadgen_heartbeat_lag_max_ms=%.0f\n",
              absl::ToDoubleMilliseconds(max_lag));
  for (auto& s : sims) s->Kill();
  WaitFor(progress, absl::Seconds(30),
          [&] { return progress.finished >= all; });
  {
    absl::MutexLock lock(&progress.mu);
    std::printf("stream_errors=%lld\n",
                static_cast<long long>(progress.errors));
    if (!progress.first_error.empty())
      std::printf("first_error=%s\n", progress.first_error.c_str());
    if (progress.finished < all) {
      std::printf("streams_not_done=%lld\n",
                  static_cast<long long>(all - progress.finished));
      std::fflush(stdout);
      _exit(ok ? 0 : 1);  // gRPC would wait for them forever
    }
  }
  for (auto& cq : queues) cq->Shutdown();
  for (std::thread& t : queue_threads) t.join();
  std::fflush(stdout);
  return ok ? 0 : 1;
}

}  // namespace

}  // namespace muster::loadgen

int main(int argc, char** argv) {
  CLI::App app{
      "muster-loadgen: simulated agents against a real musterd (see "
      "docs/performance.md)"};
  std::string endpoint;
  int agents = 0, jobs = 1, nproc = 1, musterd_pid = 0;
  double seconds = 10;
  int heartbeat_timeout_ms = static_cast<int>(
      absl::ToInt64Milliseconds(muster::loadgen::kHeartbeatTimeout));
  int heartbeat_ms = static_cast<int>(
      absl::ToInt64Milliseconds(muster::loadgen::kHeartbeatInterval));
  app.add_option("--endpoint", endpoint, "musterd address, HOST:PORT")
      ->required();
  app.add_option("--agents", agents, "simulated agents (Session streams)")
      ->required()
      ->check(CLI::Range(1, 10'000'000));
  app.add_option("--jobs", jobs, "jobs the agents are spread over")
      ->check(CLI::Range(1, 10'000'000));
  app.add_option("--nproc", nproc, "workers per simulated agent")
      ->check(CLI::Range(1, 1024));
  app.add_option("--seconds", seconds,
                 "heartbeat phase after the round formed, s")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--musterd-pid", musterd_pid,
                 "musterd's pid, for its CPU time and memory")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--heartbeat-ms", heartbeat_ms,
                 "heartbeat interval of each agent, ms (the agent's default: "
                 "250)")
      ->check(CLI::Range(10, 600'000));
  app.add_option("--heartbeat-timeout-ms", heartbeat_timeout_ms,
                 "heartbeat timeout each agent asks for, ms (default 10000; "
                 "more where this process cannot keep its schedule)")
      ->check(CLI::Range(100, 3'600'000));
  bool fixed_heartbeat = false;
  app.add_flag("--fixed-heartbeat", fixed_heartbeat,
               "heartbeat every --heartbeat-ms, ignoring the interval musterd "
               "suggests (its heartbeat budget; an agent with "
               "keep_alive_interval set does the same)");
  int lease_ms = 0;
  app.add_option("--lease-ms", lease_ms,
                 "lease each agent asks for (rdzv-conf lease_timeout), ms; 0: "
                 "musterd's default (5 s). A longer lease lets the heartbeat "
                 "budget slow heartbeats further (up to lease/4)")
      ->check(CLI::Range(0, 60'000));
  CLI11_PARSE(app, argc, argv);
  // Debian's Abseil checks every lock for deadlocks (no NDEBUG): costly with
  // one mutex per simulated agent.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (jobs > agents) {
    std::fprintf(stderr,
                 "muster-loadgen: --jobs=%d is more than --agents=%d; every "
                 "job needs at least one agent\n",
                 jobs, agents);
    return 2;
  }
  if (musterd_pid > 0 && muster::loadgen::ProcessCpuSeconds(musterd_pid) < 0) {
    std::fprintf(stderr,
                 "muster-loadgen: cannot read /proc/%d/stat: is --musterd-pid "
                 "the pid of a running musterd?\n",
                 musterd_pid);
    return 2;
  }
  muster::loadgen::HeartbeatPolicy policy;
  policy.interval = absl::Milliseconds(heartbeat_ms);
  policy.follow = !fixed_heartbeat;
  if (lease_ms > 0) {
    policy.lease = absl::Milliseconds(lease_ms);
    policy.lease_set = true;
  }
  return muster::loadgen::Run(endpoint, agents, jobs, nproc, seconds,
                              musterd_pid, policy,
                              absl::Milliseconds(heartbeat_timeout_ms));
}
