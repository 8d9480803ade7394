// muster-loadgen: N simulated agents against a real musterd, each a real
// Session stream, multiplexed over a few HTTP/2 connections with gRPC's
// async API (one completion queue per thread), in --processes shards
// (bench/loadgen/shard.h): each process has its own connections, completion
// queues and heartbeat thread, and all of them join the same jobs, so that
// the load generator is not what limits 100,000 agents on a 2-core machine.
// This process forks the shards before any gRPC object exists, steps them
// through the phases below over pipes, and prints the figures across all:
//
//   round_formed_s     earliest Join sent -> last RoundReady received
//   ready_p50_ms/p99   each agent's Join -> its RoundReady
//   form_cpu_s         CPU seconds musterd used from the first Join to the
//                      round ready (and form_cpu_us_per_join)
//   server_cpu_s       CPU seconds musterd used (/proc/PID/stat) over
//                      --seconds of heartbeats at the interval the server
//                      suggests (its heartbeat budget, as an agent follows
//                      it), or at --heartbeat-ms with --fixed-heartbeat;
//                      heartbeats_per_s sent (and _scheduled: what the
//                      agents' schedules ask for)
//   musterd_rss_mib    musterd's resident memory after the heartbeat phase
//   node_loss_*        one agent's stream closed -> every other agent of its
//                      job got Restart, and the next RoundReady (a replacement
//                      agent with a new node id joins at once, so the round
//                      re-forms at its full size)
//   loadgen_heartbeat_lag_max_ms   how far the shards' heartbeat threads
//                      fell behind (the worst); stream_errors, first_error
//
//   muster-loadgen --endpoint=127.0.0.1:29400 --agents=10000 [--jobs=1]
//                  [--processes=1] [--nproc=1] [--seconds=10]
//                  [--musterd-pid=PID] [--heartbeat-ms=250]
//                  [--heartbeat-timeout-ms=10000] [--fixed-heartbeat]
//                  [--lease-ms=0]
//
// Each job has agents/jobs nodes and min = max = that size, so its round
// closes the moment the last agent joins; shard k of N has the agents
// [k*total/N, (k+1)*total/N) of every job. The first line says channels and
// queues per process (16 and 32 shared out over the processes). Without
// --musterd-pid the server figures are skipped. Exit status 0 when every round
// formed and re-formed, 1 otherwise (the figures printed so far still stand),
// and 1 with a loadgen_error= line when a shard died or stopped answering.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/loadgen/protocol.h"
#include "bench/loadgen/shard.h"

namespace muster::loadgen {
namespace {

constexpr int kMaxProcesses = 64;
// HTTP/2 connections the streams are spread over, all processes together
// (each has its own): musterd serves as many connections whatever
// --processes, so that its figures compare.
constexpr int kChannels = 16;
// Completion queues, each drained by its own thread, all processes together.
// Not gRPC's callback API: it puts every stream of the process on one
// completion queue, and Debian's gRPC (built without NDEBUG) checks each
// completed operation against a list of every operation pending on its queue
// (cq_check_tag, a linear scan under the queue's lock), so each heartbeat
// cost O(agents) and 30,000 agents could not be driven. Here each queue holds
// agents/kQueues streams, whatever --processes. More queues than that cost
// the load generator more than their shorter scans save: at 20,000 agents in
// 4 processes, 8 queues each took 8.8 CPU-s of it, 32 each 10.6.
constexpr int kQueues = 32;

// kChannels and kQueues shared out, at least one each per process.
int ChannelsPerProcess(int processes) {
  return (kChannels + processes - 1) / processes;
}
int QueuesPerProcess(int processes) {
  return (kQueues + processes - 1) / processes;
}

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

// How a child's exit status reads.
std::string DescribeStatus(int status) {
  if (WIFEXITED(status))
    return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return absl::StrFormat("was killed by signal %d (%s)", WTERMSIG(status),
                           strsignal(WTERMSIG(status)));
  return absl::StrCat("ended (wait status ", status, ")");
}

// What one run needs: the shards' options, and the parent's own.
struct RunOptions {
  ShardOptions shard;  // begin and end are set per shard
  int processes = 1;
  int total = 0;  // agents: per_job * jobs
  double seconds = 10;
  int musterd_pid = 0;  // 0: no server figures
};

// This process: forks the shards, steps them through the phases, prints the
// figures. Single-threaded; every wait has a deadline, and a shard that dies
// or stops answering ends the run (loadgen_error=, exit status 1).
class Parent {
 public:
  explicit Parent(RunOptions o)
      : o_(std::move(o)),
        // 60 s + 1 ms per agent.
        form_timeout_(absl::Seconds(60) + absl::Milliseconds(o_.total)) {
    o_.shard.form_timeout = form_timeout_;
    // The longest the parent can take between two commands, with margin.
    o_.shard.command_timeout =
        form_timeout_ + absl::Seconds(o_.seconds) + absl::Seconds(180);
  }

  // Returns the exit status: 0 when every round formed and re-formed.
  int Run() {
    if (!Spawn()) return 1;
    if (!Collect("ready", absl::Now() + form_timeout_,
                 [](Child&, const std::string& line) {
                   return line == "ready" ? kReply : kBad;
                 }))
      return 1;
    bool formed;
    if (!Form(&formed)) return 1;
    bool ok = formed;
    if (formed) {
      bool reformed = false;
      if (!MeasureHeartbeats() || !LoseNode(&reformed)) return 1;
      ok = ok && reformed;
    }
    if (!End() || !ReapAll()) return 1;
    return ok ? 0 : 1;
  }

 private:
  struct Child {
    int index = 0;
    pid_t pid = -1;
    int begin = 0, end = 0;  // its agents
    int to = -1;             // its commands
    std::unique_ptr<LineReader> from;
    bool open = true;  // its replies' pipe
    bool reaped = false;
  };
  // What a line from a shard was: part of the awaited reply (lat lines),
  // the reply, or not what was expected.
  enum LineKind { kMore, kReply, kBad };
  using OnLine = std::function<LineKind(Child&, const std::string&)>;

  std::string Name(const Child& c) const {
    return absl::StrFormat("shard %d of %d (pid %d, agents %d-%d)", c.index,
                           o_.processes, c.pid, c.begin, c.end - 1);
  }

  // A shard's round did not (re-)form: then the others' will not either.
  // Marks `ok` false and, the first time, ends the other shards' waits (a
  // shard that is gone shows as its pipe's EOF).
  void AbortRound(bool* ok) {
    if (!*ok) return;
    *ok = false;
    for (Child& c : children_) WriteLine(c.to, "abort");
  }

  // Prints the error (stdout, for the results, and stderr), then abandons
  // the shards; returns false.
  bool Fail(const std::string& what) {
    std::printf("loadgen_error=%s\n", what.c_str());
    std::fflush(stdout);
    std::fprintf(stderr, "muster-loadgen: %s\n", what.c_str());
    Abandon();
    return false;
  }

  // Closes every pipe (each shard exits on its EOF), then reaps them all:
  // within 10 s, else SIGKILL.
  void Abandon() {
    for (Child& c : children_) {
      if (c.to >= 0) close(c.to);
      if (c.from != nullptr) close(c.from->fd());
      c.to = -1;
      c.from.reset();
      c.open = false;
    }
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    for (Child& c : children_) {
      if (c.reaped) continue;
      int status;
      while (waitpid(c.pid, &status, WNOHANG) == 0 && absl::Now() < deadline)
        absl::SleepFor(absl::Milliseconds(10));
      if (waitpid(c.pid, &status, WNOHANG) == 0) {
        kill(c.pid, SIGKILL);
        waitpid(c.pid, &status, 0);
      }
      c.reaped = true;
    }
  }

  // Its replies' pipe closed: how it ended (it has, or will within 5 s, or
  // it is killed).
  std::string Ended(Child& c) {
    int status = 0;
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    pid_t r;
    while ((r = waitpid(c.pid, &status, WNOHANG)) == 0 &&
           absl::Now() < deadline)
      absl::SleepFor(absl::Milliseconds(10));
    if (r == 0) {
      kill(c.pid, SIGKILL);
      waitpid(c.pid, &status, 0);
      c.reaped = true;
      return "closed its pipe but did not exit (killed)";
    }
    c.reaped = r == c.pid;
    return r == c.pid ? DescribeStatus(status) : "could not be waited for";
  }

  // Forks the shards, before any gRPC object exists in this process.
  bool Spawn() {
    signal(SIGPIPE, SIG_IGN);  // a dead peer's pipe: EPIPE, in the shards too
    std::fflush(stdout);
    std::fflush(stderr);
    for (int k = 0; k < o_.processes; ++k) {
      int down[2], up[2];
      if (pipe(down) != 0) return Fail(absl::StrCat("pipe: ", strerror(errno)));
      if (pipe(up) != 0) {
        close(down[0]);
        close(down[1]);
        return Fail(absl::StrCat("pipe: ", strerror(errno)));
      }
      Child c;
      c.index = k;
      c.begin = static_cast<int>(int64_t{o_.total} * k / o_.processes);
      c.end = static_cast<int>(int64_t{o_.total} * (k + 1) / o_.processes);
      c.pid = fork();
      if (c.pid == 0) {
        // Only its own pipes: a shard holding another's write end would
        // keep that one from seeing the parent's EOF.
        for (Child& other : children_) {
          close(other.to);
          close(other.from->fd());
        }
        close(down[1]);
        close(up[0]);
        ShardOptions shard = o_.shard;
        shard.begin = c.begin;
        shard.end = c.end;
        RunShard(shard, down[0], up[1]);
      }
      close(down[0]);
      close(up[1]);
      if (c.pid < 0) {
        close(down[1]);
        close(up[0]);
        return Fail(absl::StrCat("fork: ", strerror(errno)));
      }
      c.to = down[1];
      c.from = std::make_unique<LineReader>(up[0]);
      children_.push_back(std::move(c));
    }
    return true;
  }

  // Sends `command` to every shard; false (after Fail) when one is gone.
  bool Broadcast(absl::string_view command) {
    for (Child& c : children_) {
      if (!WriteLine(c.to, command))
        return Fail(
            absl::StrCat(Name(c), " ", Ended(c), " (before '", command, "')"));
    }
    return true;
  }

  // Reads the shards' lines until each has sent its `awaiting` reply
  // (on_line says which line that is), or only watches them until the
  // deadline when `awaiting` is null. False (after Fail) when a shard dies,
  // sends what was not expected, or misses the deadline. With `then_exit`, a
  // shard's pipe may close after its reply.
  bool Collect(const char* awaiting, absl::Time deadline, const OnLine& on_line,
               bool then_exit = false) {
    const std::string phase =
        awaiting == nullptr ? "during the heartbeat phase"
                            : absl::StrCat("while the parent waited for its '",
                                           awaiting, "' reply");
    const absl::Duration allowed = deadline - absl::Now();
    std::vector<bool> replied(children_.size(), awaiting == nullptr);
    size_t pending = awaiting == nullptr ? 0 : children_.size();
    for (;;) {
      for (Child& c : children_) {
        std::string line;
        while (c.open && c.from->Pop(&line)) {
          const LineKind kind = replied[c.index] ? kBad : on_line(c, line);
          if (kind == kBad) {
            return Fail(absl::StrCat(Name(c), " said '", line.substr(0, 200),
                                     "' ", phase));
          }
          if (kind == kReply) {
            replied[c.index] = true;
            --pending;
          }
        }
      }
      if (awaiting != nullptr && pending == 0) return true;
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        if (awaiting == nullptr) return true;
        for (Child& c : children_) {
          if (!replied[c.index])
            return Fail(absl::StrCat(
                Name(c), " sent no '", awaiting, "' reply within ",
                absl::FormatDuration(absl::Ceil(allowed, absl::Seconds(1)))));
        }
      }
      std::vector<pollfd> fds;
      std::vector<Child*> polled;
      for (Child& c : children_) {
        if (!c.open) continue;
        fds.push_back({c.from->fd(), POLLIN, 0});
        polled.push_back(&c);
      }
      const int n = poll(fds.data(), fds.size(),
                         static_cast<int>(absl::ToInt64Milliseconds(left) + 1));
      if (n < 0 && errno != EINTR)
        return Fail(absl::StrCat("poll: ", strerror(errno)));
      for (size_t i = 0; n > 0 && i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        Child& c = *polled[i];
        if (c.from->Fill()) continue;
        c.open = false;
        if (then_exit && replied[c.index]) continue;
        return Fail(absl::StrCat(Name(c), " ", Ended(c), " ", phase));
      }
    }
  }

  // The first round: every shard starts its Joins at once.
  bool Form(bool* formed) {
    const int musterd_pid = o_.musterd_pid;
    std::vector<double> latency_ms;
    latency_ms.reserve(o_.total);
    int64_t ready = 0;
    int64_t first_join_ns = std::numeric_limits<int64_t>::max();
    int64_t last_ready_ns = std::numeric_limits<int64_t>::min();
    *formed = true;
    const double cpu_start =
        musterd_pid > 0 ? ProcessCpuSeconds(musterd_pid) : 0.0;
    if (!Broadcast("go")) return false;
    const bool collected =
        Collect("formed", absl::Now() + form_timeout_ + absl::Seconds(30),
                [&](Child&, const std::string& line) {
                  if (ParseLatencies(line, &latency_ms)) return kMore;
                  FormedReply r;
                  if (!Parse(line, &r)) return kBad;
                  ready += r.ready;
                  first_join_ns = std::min(first_join_ns, r.first_join_ns);
                  last_ready_ns = std::max(last_ready_ns, r.last_ready_ns);
                  if (!r.formed) AbortRound(formed);
                  return kReply;
                });
    if (!collected) return false;
    const double cpu_formed =
        musterd_pid > 0 ? ProcessCpuSeconds(musterd_pid) : 0.0;
    const absl::Time t0 = absl::FromUnixNanos(first_join_ns);
    const absl::Time last_ready =
        std::max(t0, absl::FromUnixNanos(last_ready_ns));
    const HeartbeatPolicy& policy = o_.shard.policy;
    std::printf(
        "agents=%d jobs=%d nproc=%d channels=%d queues=%d heartbeat_ms=%lld "
        "follow_server_interval=%d processes=%d\n",
        o_.total, o_.shard.jobs, o_.shard.nproc, o_.shard.channels,
        o_.shard.queues,
        static_cast<long long>(absl::ToInt64Milliseconds(policy.interval)),
        policy.follow ? 1 : 0, o_.processes);
    std::printf("rounds_ready=%lld/%d\n", static_cast<long long>(ready),
                o_.total);
    std::printf("round_formed_s=%.3f%s\n",
                *formed ? absl::ToDoubleSeconds(last_ready - t0)
                        : absl::ToDoubleSeconds(form_timeout_),
                *formed ? "" : " (not formed: timed out or failed)");
    std::printf("ready_p50_ms=%.1f\nready_p99_ms=%.1f\n",
                Percentile(latency_ms, 0.50), Percentile(latency_ms, 0.99));
    if (musterd_pid > 0) {
      // musterd's CPU from the first join to the round ready (issue 39's
      // yardstick), and per join. (Results before 28 Nov name it
      // server_cpu_form_s.)
      const double form_cpu = cpu_formed - cpu_start;
      std::printf("form_cpu_s=%.2f\nform_cpu_us_per_join=%.1f\n", form_cpu,
                  form_cpu * 1e6 / o_.total);
    }
    std::fflush(stdout);
    return true;
  }

  // Heartbeats only, for --seconds: their rate against the schedule, and
  // musterd's CPU and memory meanwhile.
  bool MeasureHeartbeats() {
    const int musterd_pid = o_.musterd_pid;
    const double c0 = musterd_pid > 0 ? ProcessCpuSeconds(musterd_pid) : 0.0;
    const absl::Time h0 = absl::Now();
    if (!Broadcast("hb_start") ||
        !Collect(nullptr, h0 + absl::Seconds(o_.seconds), nullptr) ||
        !Broadcast("hb_stop"))
      return false;
    const double elapsed = absl::ToDoubleSeconds(absl::Now() - h0);
    const double used =
        musterd_pid > 0 ? ProcessCpuSeconds(musterd_pid) - c0 : 0.0;
    const double rss =
        musterd_pid > 0 ? ProcessMemoryMib(musterd_pid, "VmRSS:") : 0.0;
    const double peak_rss =
        musterd_pid > 0 ? ProcessMemoryMib(musterd_pid, "VmHWM:") : 0.0;
    // Each shard's rate over its own window, summed.
    double rate = 0, full_rate = 0;
    double interval_min = std::numeric_limits<double>::infinity();
    double interval_max = 0;
    const bool collected =
        Collect("hb", absl::Now() + absl::Seconds(30),
                [&](Child&, const std::string& line) {
                  HeartbeatReply r;
                  if (!Parse(line, &r)) return kBad;
                  if (r.elapsed_s > 0)
                    rate += static_cast<double>(r.beats) / r.elapsed_s;
                  full_rate += r.full_rate;
                  interval_min = std::min(interval_min, r.interval_min_ms);
                  interval_max = std::max(interval_max, r.interval_max_ms);
                  return kReply;
                });
    if (!collected) return false;
    const double beats = rate * elapsed;
    std::printf(
        "heartbeat_interval_ms_min=%.0f\nheartbeat_interval_ms_max=%.0f\n",
        interval_min, interval_max);
    std::printf("heartbeats_per_s=%.0f\nheartbeats_per_s_scheduled=%.0f\n",
                rate, full_rate);
    if (musterd_pid > 0) {
      std::printf("heartbeat_s=%.1f\nserver_cpu_s=%.2f\n", elapsed, used);
      std::printf("server_cpu_per_s=%.3f\n", used / elapsed);
      if (beats > 0) {
        // musterd's CPU per heartbeat, and what the full schedule would cost
        // at that rate.
        const double us = used / beats * 1e6;
        std::printf("server_cpu_us_per_heartbeat=%.1f\n", us);
        std::printf("server_cpu_per_s_full_rate=%.3f\n", us * full_rate / 1e6);
      }
      std::printf("musterd_rss_mib=%.1f\nmusterd_peak_rss_mib=%.1f\n", rss,
                  peak_rss);
    }
    std::fflush(stdout);
    return true;
  }

  // Node loss: agent 1 of job 0 (not its first joiner) dies, in whichever
  // shard holds it; a replacement with a new node id joins at once. Sets
  // *reformed to whether job 0 formed its next round within form_timeout_.
  bool LoseNode(bool* reformed) {
    int64_t restarts = 0, survivors = 0;
    int64_t killed_ns = std::numeric_limits<int64_t>::min();
    int64_t last_restart_ns = killed_ns, last_ready_ns = killed_ns;
    *reformed = true;
    if (!Broadcast("lose")) return false;
    const bool collected = Collect(
        "lost", absl::Now() + form_timeout_ + absl::Seconds(30),
        [&](Child&, const std::string& line) {
          LossReply r;
          if (!Parse(line, &r)) return kBad;
          restarts += r.restarts;
          survivors += r.survivors;
          killed_ns = std::max(killed_ns, r.killed_ns);
          last_restart_ns = std::max(last_restart_ns, r.last_restart_ns);
          last_ready_ns = std::max(last_ready_ns, r.last_ready_ns);
          if (!r.reformed) AbortRound(reformed);
          return kReply;
        });
    if (!collected) return false;
    if (killed_ns == std::numeric_limits<int64_t>::min())
      return Fail("no shard said it killed the node loss's victim");
    const absl::Time k0 = absl::FromUnixNanos(killed_ns);
    const absl::Time last_restart =
        std::max(k0, absl::FromUnixNanos(last_restart_ns));
    const absl::Time last_ready =
        std::max(k0, absl::FromUnixNanos(last_ready_ns));
    std::printf("node_loss_restarts=%lld/%lld\n",
                static_cast<long long>(restarts),
                static_cast<long long>(survivors));
    std::printf("node_loss_restart_s=%.3f\n",
                absl::ToDoubleSeconds(last_restart - k0));
    std::printf("node_loss_ready_s=%.3f%s\n",
                *reformed ? absl::ToDoubleSeconds(last_ready - k0)
                          : absl::ToDoubleSeconds(form_timeout_),
                *reformed ? "" : " (not re-formed)");
    std::fflush(stdout);
    return true;
  }

  // End: every shard's agents report success and wait for the verdicts (30
  // s), then cancel what is left (30 s more).
  bool End() {
    double lag_max_ms = 0;
    int64_t errors = 0, finished = 0, streams = 0;
    std::string first_error;
    if (!Broadcast("end")) return false;
    const bool collected = Collect(
        "end", absl::Now() + absl::Seconds(90),
        [&](Child&, const std::string& line) {
          EndReply r;
          if (!Parse(line, &r)) return kBad;
          lag_max_ms = std::max(lag_max_ms, r.heartbeat_lag_max_ms);
          errors += r.errors;
          finished += r.finished;
          streams += r.streams;
          if (first_error.empty()) first_error = r.first_error;
          return kReply;
        },
        /*then_exit=*/true);
    if (!collected) return false;
    std::printf("loadgen_heartbeat_lag_max_ms=%.0f\n", lag_max_ms);
    std::printf("stream_errors=%lld\n", static_cast<long long>(errors));
    if (!first_error.empty())
      std::printf("first_error=%s\n", first_error.c_str());
    if (finished < streams) {
      std::printf("streams_not_done=%lld\n",
                  static_cast<long long>(streams - finished));
    }
    std::fflush(stdout);
    return true;
  }

  // After End: each shard exits 0 within 60 s, else the run failed.
  bool ReapAll() {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    for (Child& c : children_) {
      if (c.reaped) continue;
      int status = 0;
      pid_t r;
      while ((r = waitpid(c.pid, &status, WNOHANG)) == 0 &&
             absl::Now() < deadline)
        absl::SleepFor(absl::Milliseconds(10));
      if (r == 0)
        return Fail(absl::StrCat(Name(c),
                                 " did not exit within 60 s of "
                                 "its last reply"));
      c.reaped = true;
      if (r != c.pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return Fail(absl::StrCat(Name(c), " ", DescribeStatus(status),
                                 " after its last reply"));
    }
    return true;
  }

  RunOptions o_;
  const absl::Duration form_timeout_;
  std::vector<Child> children_;
};

}  // namespace

}  // namespace muster::loadgen

int main(int argc, char** argv) {
  CLI::App app{
      "muster-loadgen: simulated agents against a real musterd (see "
      "docs/performance.md)"};
  std::string endpoint;
  int agents = 0, jobs = 1, nproc = 1, musterd_pid = 0, processes = 1;
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
  app.add_option("--processes", processes,
                 "processes the agents are spread over, each with its own "
                 "connections, completion queues and heartbeat thread; all "
                 "join the same jobs (1..64, at most --agents)")
      ->check(CLI::Range(1, muster::loadgen::kMaxProcesses));
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
  // one mutex per simulated agent. (The shards inherit this.)
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (jobs > agents) {
    std::fprintf(stderr,
                 "muster-loadgen: --jobs=%d is more than --agents=%d; every "
                 "job needs at least one agent\n",
                 jobs, agents);
    return 2;
  }
  const int total = agents / jobs * jobs;
  if (processes > total) {
    std::fprintf(stderr,
                 "muster-loadgen: --processes=%d is more than the %d "
                 "simulated agents (--agents=%d in --jobs=%d); every process "
                 "needs at least one agent\n",
                 processes, total, agents, jobs);
    return 2;
  }
  if (musterd_pid > 0 && muster::loadgen::ProcessCpuSeconds(musterd_pid) < 0) {
    std::fprintf(stderr,
                 "muster-loadgen: cannot read /proc/%d/stat: is --musterd-pid "
                 "the pid of a running musterd?\n",
                 musterd_pid);
    return 2;
  }
  muster::loadgen::RunOptions o;
  o.processes = processes;
  o.total = total;
  o.seconds = seconds;
  o.musterd_pid = musterd_pid;
  muster::loadgen::ShardOptions& shard = o.shard;
  shard.endpoint = endpoint;
  shard.run = absl::StrCat("loadgen-", getpid());
  shard.jobs = jobs;
  shard.per_job = agents / jobs;
  shard.nproc = nproc;
  shard.victim = std::min(jobs, total - 1);  // job 0's second agent
  shard.channels = muster::loadgen::ChannelsPerProcess(processes);
  shard.queues = muster::loadgen::QueuesPerProcess(processes);
  shard.policy.interval = absl::Milliseconds(heartbeat_ms);
  shard.policy.follow = !fixed_heartbeat;
  if (lease_ms > 0) {
    shard.policy.lease = absl::Milliseconds(lease_ms);
    shard.policy.lease_set = true;
  }
  shard.heartbeat_timeout = absl::Milliseconds(heartbeat_timeout_ms);
  return muster::loadgen::Parent(std::move(o)).Run();
}
