#include "bench/loadgen/shard.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/loadgen/protocol.h"

namespace muster::loadgen {
namespace {

[[noreturn]] void Die(absl::string_view why) {
  std::fprintf(stderr, "muster-loadgen shard %d: %.*s\n", getpid(),
               static_cast<int>(why.size()), why.data());
  _exit(1);
}

int64_t Ns(absl::Time t) { return absl::ToUnixNanos(t); }

class Shard {
 public:
  Shard(const ShardOptions& options, int from_parent, int to_parent)
      : o_(options),
        to_parent_(to_parent),
        local_(options.end - options.begin),
        victim_here_(options.victim >= options.begin &&
                     options.victim < options.end) {
    // The parent's commands: read by their own thread, so that an "abort"
    // ends a wait, and the parent's end (EOF) ends this process wherever it
    // is.
    std::thread([this, from_parent] { ReadCommands(from_parent); }).detach();
    for (int i = 0; i < o_.channels; ++i) {
      grpc::ChannelArguments args;
      // A distinct argument per channel: each gets its own connection.
      args.SetInt("muster.loadgen.channel", i);
      args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, -1);
      stubs_.push_back(v1::Rendezvous::NewStub(grpc::CreateCustomChannel(
          o_.endpoint, grpc::InsecureChannelCredentials(), args)));
    }
    for (int i = 0; i < o_.queues; ++i) {
      queues_.push_back(std::make_unique<grpc::CompletionQueue>());
      queue_threads_.emplace_back([cq = queues_.back().get()] {
        void* tag = nullptr;
        bool ok = false;
        while (cq->Next(&tag, &ok)) SimAgent::Dispatch(tag, ok);
      });
    }
    // Never reallocated: the heartbeat thread reads it (the replacement
    // agent is the +1).
    sims_.reserve(local_ + 1);
    for (int i = 0; i < local_; ++i) {
      const int global = o_.begin + i;
      sims_.push_back(std::make_unique<SimAgent>(
          global, MakeJoin(global % o_.jobs, absl::StrCat("n", global), global),
          &progress_, queues_[i % o_.queues].get(), &o_.policy));
    }
    heartbeats_ = std::thread([this] { Heartbeats(); });
  }

  [[noreturn]] void Run() {
    Send("ready");
    for (;;) {
      const Command c = NextCommand();
      if (c.line == "go") {
        Form(c.aborts);
      } else if (c.line == "hb_start") {
        hb_beats_ = heartbeats_sent_.load();
        hb_start_ = absl::Now();
      } else if (c.line == "hb_stop") {
        MeasureHeartbeats();
      } else if (c.line == "lose") {
        LoseNode(c.aborts);
      } else if (c.line == "end") {
        End();
      } else {
        Die(absl::StrCat("unknown command from the parent: ", c.line));
      }
    }
  }

 private:
  struct Command {
    std::string line;
    int64_t aborts;  // aborts before it: a later one ends its wait
  };

  void ReadCommands(int fd) {
    LineReader reader(fd);
    std::string line;
    while (reader.Next(absl::InfiniteFuture(), &line) ==
           LineReader::Result::kLine) {
      absl::MutexLock lock(&progress_.mu);
      if (line == "abort") {
        ++aborts_;
      } else {
        commands_.push_back({line, aborts_});
      }
    }
    // The parent is gone, or gave up on this run: so does this shard.
    _exit(1);
  }

  Command NextCommand() {
    absl::MutexLock lock(&progress_.mu);
    auto any = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(progress_.mu) {
      return !commands_.empty();
    };
    if (!progress_.mu.AwaitWithTimeout(absl::Condition(&any),
                                       o_.command_timeout)) {
      Die(absl::StrCat("no command from the parent in ",
                       absl::FormatDuration(o_.command_timeout)));
    }
    Command c = std::move(commands_.front());
    commands_.pop_front();
    return c;
  }

  void Send(absl::string_view line) {
    if (!WriteLine(to_parent_, line)) _exit(1);  // the parent is gone
  }

  // Waits until done() (called under progress_.mu), an abort the command
  // did not see before it came (`aborts`), or the timeout; returns done().
  template <typename Pred>
  bool WaitFor(int64_t aborts, absl::Duration timeout, Pred done) {
    absl::MutexLock lock(&progress_.mu);
    auto over = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(progress_.mu) {
      return aborts_ > aborts || done();
    };
    progress_.mu.AwaitWithTimeout(absl::Condition(&over), timeout);
    return done();
  }

  v1::Join MakeJoin(int job, const std::string& node_id, int index) const {
    v1::Join j;
    j.set_job_id(absl::StrCat(o_.run, "-", job));
    j.set_node_id(node_id);
    j.set_hostname(node_id);
    j.set_advertised_addr("127.0.0.1");
    j.set_local_world_size(o_.nproc);
    j.set_min_nodes(o_.per_job);
    j.set_max_nodes(o_.per_job);
    j.set_node_rank_hint(-1);
    j.set_max_restarts(0);
    j.set_master_port(30000 + index % 20000);
    j.set_join_timeout_ms(600'000);
    j.set_last_call_timeout_ms(30'000);
    j.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(o_.policy.interval));
    j.set_heartbeat_timeout_ms(absl::ToInt64Milliseconds(o_.heartbeat_timeout));
    if (o_.policy.lease_set)
      j.set_lease_timeout_ms(absl::ToInt64Milliseconds(o_.policy.lease));
    j.set_lease_from_round_ready(true);  // as the agent does
    return j;
  }

  // Each agent is visited every --heartbeat-ms (its slot of 25) and beats
  // when its own schedule (the server's interval when following) says so.
  void Heartbeats() {
    constexpr int kSlots = 25;
    const absl::Duration heartbeat_interval = o_.policy.interval;
    int slot = 0;
    absl::Time next = absl::Now();
    while (!stop_heartbeats_.load()) {
      next += heartbeat_interval / kSlots;
      const absl::Duration ahead = next - absl::Now();
      if (-ahead > max_lag_) max_lag_ = -ahead;
      absl::SleepFor(ahead);
      const int n = started_.load();
      const absl::Time now = absl::Now();
      int64_t sent = 0;
      for (int i = slot; i < n; i += kSlots)
        sent += sims_[i]->HeartbeatIfDue(now);
      heartbeats_sent_.fetch_add(sent, std::memory_order_relaxed);
      slot = (slot + 1) % kSlots;
    }
  }

  // go: every agent joins; the reply says how far the first round got.
  void Form(int64_t aborts) {
    for (int i = 0; i < local_; ++i) {
      sims_[i]->Start(stubs_[i % o_.channels].get());
      started_.store(i + 1);
    }
    // Ends early on a lost agent's early end (as on a verdict): the round
    // cannot form at its full size any more.
    WaitFor(aborts, o_.form_timeout,
            [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(progress_.mu) {
              return progress_.ready[1] >= local_ || progress_.verdicts > 0 ||
                     progress_.finished > 0;
            });
    FormedReply r;
    {
      absl::MutexLock lock(&progress_.mu);
      r.ready = progress_.ready[1];
      r.formed = r.ready >= local_;
    }
    absl::Time first_join = absl::InfiniteFuture();
    absl::Time last_ready = absl::UnixEpoch();
    std::vector<double> latency_ms;
    latency_ms.reserve(local_);
    for (int i = 0; i < local_; ++i) {
      const absl::Time joined = sims_[i]->join_sent();
      first_join = std::min(first_join, joined);
      const absl::Time ready = sims_[i]->ready_at(1);
      if (ready == absl::Time()) continue;
      last_ready = std::max(last_ready, ready);
      latency_ms.push_back(absl::ToDoubleMilliseconds(ready - joined));
    }
    r.first_join_ns = Ns(first_join);
    r.last_ready_ns = Ns(last_ready);
    for (const std::string& line : LatencyLines(latency_ms)) Send(line);
    Send(ToLine(r));
  }

  // hb_stop: the heartbeats since hb_start, and the schedule.
  void MeasureHeartbeats() {
    HeartbeatReply r;
    r.beats = heartbeats_sent_.load() - hb_beats_;
    r.elapsed_s = absl::ToDoubleSeconds(absl::Now() - hb_start_);
    r.interval_min_ms = std::numeric_limits<double>::infinity();
    r.interval_max_ms = 0;
    for (int i = 0; i < local_; ++i) {
      const double ms = absl::ToDoubleMilliseconds(sims_[i]->interval());
      r.interval_min_ms = std::min(r.interval_min_ms, ms);
      r.interval_max_ms = std::max(r.interval_max_ms, ms);
      r.full_rate += 1000.0 / ms;
    }
    Send(ToLine(r));
  }

  // lose: the shard holding the victim kills it and starts a replacement
  // with a new node id at once; every shard waits for its agents of job 0
  // (the replacement too) to be in the next round.
  void LoseNode(int64_t aborts) {
    LossReply r;
    int64_t restarts_before;
    {
      absl::MutexLock lock(&progress_.mu);
      restarts_before = progress_.restarts;
    }
    std::vector<int> survivors;  // local indices
    for (int i = 0; i < local_; ++i) {
      const int global = o_.begin + i;
      if (global % o_.jobs == 0 && global != o_.victim) survivors.push_back(i);
    }
    r.survivors = static_cast<int64_t>(survivors.size());
    if (victim_here_) {
      const int total = o_.per_job * o_.jobs;
      sims_.push_back(std::make_unique<SimAgent>(
          total,
          MakeJoin(0, absl::StrCat("n", o_.victim, "-replacement"), total),
          &progress_, queues_[local_ % o_.queues].get(), &o_.policy));
      const absl::Time killed = absl::Now();
      sims_[o_.victim - o_.begin]->Kill();
      sims_[local_]->Start(stubs_[0].get());
      started_.store(local_ + 1);
      r.killed_ns = Ns(killed);
    }
    const int64_t in_round = local_ + (victim_here_ ? 1 : 0);
    auto reformed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(progress_.mu) {
      return progress_.ready[2] >= r.survivors &&
             progress_.ready[1] >= in_round;
    };
    WaitFor(aborts, o_.form_timeout,
            [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(progress_.mu) {
              return reformed() || progress_.verdicts > 0;
            });
    {
      absl::MutexLock lock(&progress_.mu);
      r.restarts = progress_.restarts - restarts_before;
      r.reformed = reformed();  // not a verdict's early end
    }
    absl::Time last_restart = absl::InfinitePast();
    absl::Time last_ready = absl::InfinitePast();
    for (int i : survivors) {
      last_restart = std::max(last_restart, sims_[i]->restart_at());
      last_ready = std::max(last_ready, sims_[i]->ready_at(2));
    }
    if (victim_here_)
      last_ready = std::max(last_ready, sims_[local_]->ready_at(1));
    r.last_restart_ns = Ns(last_restart);
    r.last_ready_ns = Ns(last_ready);
    Send(ToLine(r));
  }

  // end: every agent reports success (the server closes each stream with
  // the verdict); whatever is left after 30 s is cancelled. Heartbeats go on
  // until the verdicts are in: a real agent beats until it exits.
  [[noreturn]] void End() {
    const int64_t all = static_cast<int64_t>(sims_.size());
    // The victim, killed here, gets none.
    const int64_t verdicts = all - (all > local_ ? 1 : 0);
    for (auto& s : sims_) s->Succeed();
    WaitFor(std::numeric_limits<int64_t>::max(), absl::Seconds(30),
            [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(progress_.mu) {
              return progress_.verdicts >= verdicts;
            });
    stop_heartbeats_.store(true);
    heartbeats_.join();
    for (auto& s : sims_) s->Kill();
    WaitFor(std::numeric_limits<int64_t>::max(), absl::Seconds(30),
            [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(progress_.mu) {
              return progress_.finished >= all;
            });
    EndReply r;
    r.heartbeat_lag_max_ms = absl::ToDoubleMilliseconds(max_lag_);
    r.streams = all;
    {
      absl::MutexLock lock(&progress_.mu);
      r.errors = progress_.errors;
      r.finished = progress_.finished;
      r.first_error = progress_.first_error;
    }
    Send(ToLine(r));
    // gRPC would wait forever for streams not done.
    if (r.finished < all) _exit(0);
    for (auto& cq : queues_) cq->Shutdown();
    for (std::thread& t : queue_threads_) t.join();
    _exit(0);
  }

  const ShardOptions o_;
  const int to_parent_;
  const int local_;  // agents of this shard, not counting the replacement
  const bool victim_here_;

  Progress progress_;
  std::deque<Command> commands_ ABSL_GUARDED_BY(progress_.mu);
  int64_t aborts_ ABSL_GUARDED_BY(progress_.mu) = 0;

  std::vector<std::unique_ptr<v1::Rendezvous::Stub>> stubs_;
  std::vector<std::unique_ptr<grpc::CompletionQueue>> queues_;
  std::vector<std::thread> queue_threads_;
  std::vector<std::unique_ptr<SimAgent>> sims_;

  std::thread heartbeats_;
  std::atomic<bool> stop_heartbeats_{false};
  std::atomic<int> started_{0};  // sims_ the heartbeat thread visits
  // Heartbeats handed to gRPC: when the load generator falls behind its
  // schedule, fewer than agents x 1000/heartbeat_ms a second reach musterd,
  // and its CPU per heartbeat is the fair figure.
  std::atomic<int64_t> heartbeats_sent_{0};
  // How far the heartbeat thread fell behind its schedule: over a second, and
  // the server's losses are the load generator's fault, not the server's.
  // Written by the heartbeat thread, read once it is joined.
  absl::Duration max_lag_;
  int64_t hb_beats_ = 0;  // at hb_start
  absl::Time hb_start_;
};

}  // namespace

void RunShard(const ShardOptions& options, int from_parent, int to_parent) {
  // Never destroyed: the process ends with _exit, as gRPC's threads run.
  auto* shard = new Shard(options, from_parent, to_parent);
  shard->Run();
}

}  // namespace muster::loadgen
