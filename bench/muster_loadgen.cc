// muster-loadgen: N simulated agents against a real musterd, each a real
// Session stream, multiplexed over a few HTTP/2 connections with gRPC's
// callback API in one process. It measures what the rendezvous costs at scale:
//
//   round_formed_s     first Join sent -> last RoundReady received
//   ready_p50_ms/p99   each agent's Join -> its RoundReady
//   server_cpu_s       CPU seconds musterd used (/proc/PID/stat) over
//                      --seconds of heartbeats at the agent's default interval
//   musterd_rss_mib    musterd's resident memory after the heartbeat phase
//   node_loss_*        one agent's stream closed -> every other agent of its
//                      job got Restart, and the next RoundReady (a replacement
//                      agent with a new node id joins at once, so the round
//                      re-forms at its full size)
//
//   muster-loadgen --endpoint=127.0.0.1:29400 --agents=10000 [--jobs=1]
//                  [--nproc=1] [--seconds=10] [--musterd-pid=PID]
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
#include "muster/v1/rendezvous.grpc.pb.h"

namespace muster::loadgen {
namespace {

using Reactor = grpc::ClientBidiReactor<v1::AgentMessage, v1::ServerMessage>;

// The agent's default interval (agent/include/muster/agent/config.h): a
// heartbeat every 250 ms. Its default timeout is 4 intervals (1 s); the
// simulated agents ask for 10 s instead: this one process does the client side
// of every agent, which costs about as much CPU per heartbeat as musterd's
// side, and on a shared 2-core machine its own lag (printed as
// loadgen_heartbeat_lag_max_ms) would otherwise make musterd drop agents that
// a real node would have kept alive.
constexpr absl::Duration kHeartbeatInterval = absl::Milliseconds(250);
constexpr absl::Duration kHeartbeatTimeout = absl::Seconds(10);
// HTTP/2 connections the streams are spread over.
constexpr int kChannels = 8;

// Counters the main thread waits on.
struct Progress {
  absl::Mutex mu;
  int64_t ready[3] ABSL_GUARDED_BY(mu) = {0, 0, 0};  // RoundReady of round r
  int64_t restarts ABSL_GUARDED_BY(mu) = 0;
  int64_t finished ABSL_GUARDED_BY(mu) = 0;  // streams done (OnDone)
  int64_t errors ABSL_GUARDED_BY(mu) = 0;    // streams ended with an error
  int64_t verdicts ABSL_GUARDED_BY(mu) = 0;  // JobSucceeded / JobFailed
  std::string first_error ABSL_GUARDED_BY(mu);
};

// One simulated agent: one Session stream. Writes go one at a time (gRPC
// allows one in flight); the rest queue. A hold keeps the stream alive until
// Stop, so the heartbeat thread may write at any time.
class SimAgent final : public Reactor {
 public:
  SimAgent(int index, v1::Join join, Progress* progress)
      : index_(index), join_(std::move(join)), progress_(progress) {}

  void Start(v1::Rendezvous::Stub* stub) {
    stub->async()->Session(&context_, this);
    AddHold();
    {
      absl::MutexLock lock(&mu_);
      join_sent_ = absl::Now();
    }
    Write(JoinMessage());
    StartRead(&in_);
    StartCall();
  }

  void Heartbeat() {
    v1::AgentMessage msg;
    int64_t round;
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) return;
      round = round_;
    }
    msg.mutable_heartbeat()->set_round(round);
    Write(std::move(msg));
  }

  void Succeed() {
    v1::AgentMessage msg;
    {
      absl::MutexLock lock(&mu_);
      msg.mutable_workers_succeeded()->set_round(round_);
    }
    Write(std::move(msg));
  }

  // Ends this agent's stream as a crashed agent's would end.
  void Kill() {
    {
      absl::MutexLock lock(&mu_);
      stopped_ = true;
    }
    context_.TryCancel();
  }

  // Lets the stream finish (after Kill or a verdict).
  void Stop() {
    bool release = false;
    {
      absl::MutexLock lock(&mu_);
      stopped_ = true;
      if (!hold_released_ && !write_in_flight_) {
        hold_released_ = true;
        release = true;
      }
    }
    if (release) RemoveHold();
  }

  void OnWriteDone(bool ok) override {
    v1::AgentMessage* next = nullptr;
    bool release = false;
    {
      absl::MutexLock lock(&mu_);
      write_in_flight_ = false;
      if (!ok) queue_.clear();
      if (!queue_.empty()) {
        writing_ = std::move(queue_.front());
        queue_.pop_front();
        write_in_flight_ = true;
        next = &writing_;
      } else if (stopped_ && !hold_released_) {
        hold_released_ = true;
        release = true;
      }
    }
    if (next != nullptr) StartWrite(next);
    if (release) RemoveHold();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended; OnDone follows
    const absl::Time now = absl::Now();
    bool rejoin = false;
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
    // A real agent stops its workers, then joins the next round.
    if (rejoin) Write(JoinMessage());
    StartRead(&in_);
  }

  void OnDone(const grpc::Status& status) override {
    absl::MutexLock lock(&progress_->mu);
    ++progress_->finished;
    if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED) {
      if (progress_->errors++ == 0)
        progress_->first_error =
            absl::StrCat("agent ", index_, ": ", status.error_message(),
                         " (code ", static_cast<int>(status.error_code()), ")");
    }
  }

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
  v1::AgentMessage JoinMessage() const {
    v1::AgentMessage msg;
    *msg.mutable_join() = join_;
    return msg;
  }

  void Write(v1::AgentMessage msg) {
    {
      absl::MutexLock lock(&mu_);
      if (hold_released_) return;
      if (write_in_flight_) {
        queue_.push_back(std::move(msg));
        return;
      }
      write_in_flight_ = true;
      writing_ = std::move(msg);
    }
    StartWrite(&writing_);
  }

  const int index_;
  const v1::Join join_;
  Progress* const progress_;
  grpc::ClientContext context_;
  v1::ServerMessage in_;  // owned by the read path

  absl::Mutex mu_;
  std::deque<v1::AgentMessage> queue_ ABSL_GUARDED_BY(mu_);
  v1::AgentMessage writing_;  // the write in flight
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_released_ ABSL_GUARDED_BY(mu_) = false;
  int64_t round_ ABSL_GUARDED_BY(mu_) = 0;
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

int Run(const std::string& endpoint, int agents, int jobs, int nproc,
        double seconds, int musterd_pid) {
  const int per_job = agents / jobs;
  const std::string run = absl::StrCat("loadgen-", getpid());
  std::vector<std::unique_ptr<v1::Rendezvous::Stub>> stubs;
  for (int i = 0; i < kChannels; ++i) {
    grpc::ChannelArguments args;
    // A distinct argument per channel: each gets its own connection.
    args.SetInt("muster.loadgen.channel", i);
    args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, -1);
    stubs.push_back(v1::Rendezvous::NewStub(grpc::CreateCustomChannel(
        endpoint, grpc::InsecureChannelCredentials(), args)));
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
    j.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(kHeartbeatInterval));
    j.set_heartbeat_timeout_ms(absl::ToInt64Milliseconds(kHeartbeatTimeout));
    return j;
  };
  for (int i = 0; i < per_job * jobs; ++i) {
    sims.push_back(std::make_unique<SimAgent>(
        i, make_join(i % jobs, absl::StrCat("n", i)), &progress));
  }
  const int total = static_cast<int>(sims.size());

  // Heartbeats: every agent each interval, spread over 25 slots.
  std::atomic<bool> stop_heartbeats{false};
  std::atomic<int> started{0};
  // How far the heartbeat thread fell behind its schedule: over a second, and
  // the server's losses are the load generator's fault, not the server's.
  absl::Duration max_lag;
  std::thread heartbeats([&] {
    constexpr int kSlots = 25;
    int slot = 0;
    absl::Time next = absl::Now();
    while (!stop_heartbeats.load()) {
      next += kHeartbeatInterval / kSlots;
      const absl::Duration ahead = next - absl::Now();
      if (-ahead > max_lag) max_lag = -ahead;
      absl::SleepFor(ahead);
      const int n = started.load();
      for (int i = slot; i < n; i += kSlots) sims[i]->Heartbeat();
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
  const bool formed = WaitFor(progress, form_timeout, [&] {
    return progress.ready[1] >= total || progress.verdicts > 0 ||
           progress.finished > 0;
  });
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
  std::printf("agents=%d jobs=%d nproc=%d channels=%d\n", total, jobs, nproc,
              kChannels);
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
    std::printf("server_cpu_form_s=%.2f\n", cpu_formed - cpu_start);
  }
  std::fflush(stdout);
  bool ok = formed;

  if (formed) {
    // Heartbeats only, for `seconds`.
    const double c0 = musterd_pid > 0 ? ProcessCpuSeconds(musterd_pid) : 0.0;
    const absl::Time h0 = absl::Now();
    absl::SleepFor(absl::Seconds(seconds));
    const double elapsed = absl::ToDoubleSeconds(absl::Now() - h0);
    if (musterd_pid > 0) {
      const double used = ProcessCpuSeconds(musterd_pid) - c0;
      std::printf("heartbeat_s=%.1f\nserver_cpu_s=%.2f\n", elapsed, used);
      std::printf("server_cpu_per_s=%.3f\n", used / elapsed);
      std::printf("musterd_rss_mib=%.1f\nmusterd_peak_rss_mib=%.1f\n",
                  ProcessMemoryMib(musterd_pid, "VmRSS:"),
                  ProcessMemoryMib(musterd_pid, "VmHWM:"));
    }
    std::fflush(stdout);

    // Node loss: agent 1 of job 0 (not its first joiner) dies; a replacement
    // with a new node id joins at once.
    int64_t restarts_before;
    {
      absl::MutexLock lock(&progress.mu);
      restarts_before = progress.restarts;
    }
    const int victim = std::min(jobs, total - 1);  // job 0's second agent
    const std::string job0 = sims[0]->job_id();
    int job0_survivors = 0;
    for (int i = 0; i < total; ++i)
      job0_survivors += (i != victim && sims[i]->job_id() == job0);
    sims.push_back(std::make_unique<SimAgent>(
        total, make_join(0, absl::StrCat("n", victim, "-replacement")),
        &progress));
    const absl::Time k0 = absl::Now();
    sims[victim]->Kill();
    sims[total]->Start(stubs[0].get());
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
    ok = ok && reformed;
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
  for (auto& s : sims) {
    s->Stop();
    s->Kill();
  }
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
  return muster::loadgen::Run(endpoint, agents, jobs, nproc, seconds,
                              musterd_pid);
}
