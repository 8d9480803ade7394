// The chaos test (issue 11 item 6): a 3-node elastic job (--nnodes=2:3, two
// workers per node) on a real musterd with --state-dir, while a seeded driver
// kills at random (kill -9) workers, agents (a replacement agent for that
// node starts after a short delay, as a supervisor would) and musterd (a new
// one on the same port with the same --state-dir). Then the chaos stops and
// the job must end correctly:
//   - every agent that was not killed exits 0, and the last round's workers
//     all ran to completion;
//   - no process the test started is left (each carries a marker in its
//     environment; /proc/*/environ is scanned at the end);
//   - the round history the workers logged keeps the rules of the state
//     machine (rendezvous/include/muster/rendezvous/coordinator.h), see
//     CheckHistory;
//   - a musterd restart within 0.3 s while the round is settled (all members
//     back, all workers running) restarts no worker and fences none for 5 s:
//     musterd re-adopts the round.
// A second test runs the same chaos on replicated musterd (issue 25): two
// replicas over a 3-member etcd cluster on loopback, the agents given both;
// every musterd kill is a kill -9 of the leader, started again as a standby,
// and the other replica re-adopts the round.
//
// MUSTER_CHAOS_SEED repeats a run's choices (the seed is printed; timings
// differ from run to run); the chaos lasts
// MUSTER_CHAOS_SECONDS (default 60; run the binary itself for longer, ctest
// stops it at its TIMEOUT).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/etcd.h"
#include "tests/testing/subprocess.h"

namespace muster {
namespace {

using ::muster::testing::BinPath;
using ::muster::testing::ProcessAlive;
using ::muster::testing::Subprocess;
using ::muster::testing::WaitUntil;

constexpr int kNodes = 3;
constexpr int kMinNodes = 2;
constexpr int kProcsPerNode = 2;
constexpr int kMaxRestarts = 1000;
constexpr char kMarkName[] = "MUSTER_CHAOS_MARK";

// The worker: logs its start (with its round, ranks, sizes, restart count,
// master and pid), starts a long-lived child of its own, ticks every 0.2 s, and
// once the finish file exists, five more ticks, "done", exit 0. Fields are
// space-separated; times are $EPOCHREALTIME (wall clock, microseconds).
constexpr char kWorkerScript[] = R"(#!/bin/bash
export LC_ALL=C
log="$CHAOS_LOG"
echo "start $EPOCHREALTIME $CHAOS_NODE $$ $MUSTER_ROUND $RANK $LOCAL_RANK $GROUP_RANK $GROUP_WORLD_SIZE $WORLD_SIZE $TORCHELASTIC_RESTART_COUNT $MASTER_ADDR:$MASTER_PORT" >> "$log"
# A child that outlives a killed worker unless its launcher cleans up (a data
# loader, say): the orphan check counts it.
sleep 600 >/dev/null 2>&1 &
left=-1
while :; do
  sleep 0.2
  echo "tick $EPOCHREALTIME $CHAOS_NODE $$" >> "$log"
  if ((left < 0)) && [[ -e "$CHAOS_FINISH" ]]; then left=5; fi
  if ((left >= 0)); then
    ((left -= 1))
    ((left < 0)) && break
  fi
done
echo "done $EPOCHREALTIME $CHAOS_NODE $$" >> "$log"
exit 0
)";

// One worker process, as its log lines tell.
struct WorkerRecord {
  double start = 0;
  double last_seen = 0;  // the start, its last tick, or done
  bool done = false;
  std::string node;
  pid_t pid = 0;
  int round = 0, rank = 0, local_rank = 0, group_rank = 0;
  int group_world_size = 0, world_size = 0, restart_count = 0;
  std::string master;
};

// Parses the log: workers in the order they started. Only whole lines (a
// worker may be writing the last one).
std::vector<WorkerRecord> ReadWorkers(const std::string& path,
                                      std::vector<std::string>* errors) {
  std::ifstream in(path);
  std::stringstream buf;
  buf << in.rdbuf();
  std::string text = buf.str();
  text.resize(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n'));
  std::vector<WorkerRecord> out;
  std::map<pid_t, size_t> latest;  // pid -> its latest start
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    double t = 0;
    int pid = 0;
    if (f.size() < 4 || !absl::SimpleAtod(f[1], &t) ||
        !absl::SimpleAtoi(f[3], &pid)) {
      errors->push_back(absl::StrCat("bad log line: ", line));
      continue;
    }
    if (f[0] == "start") {
      WorkerRecord w;
      w.start = w.last_seen = t;
      w.node = f[2];
      w.pid = pid;
      int* ints[] = {&w.round,
                     &w.rank,
                     &w.local_rank,
                     &w.group_rank,
                     &w.group_world_size,
                     &w.world_size,
                     &w.restart_count};
      bool ok = f.size() == 12;
      for (int i = 0; ok && i < 7; ++i)
        ok = absl::SimpleAtoi(f[4 + i], ints[i]);
      if (!ok) {
        errors->push_back(absl::StrCat("bad start line: ", line));
        continue;
      }
      w.master = f[11];
      latest[pid] = out.size();
      out.push_back(w);
    } else if (auto it = latest.find(pid); it != latest.end()) {
      WorkerRecord& w = out[it->second];
      w.last_seen = std::max(w.last_seen, t);
      if (f[0] == "done") w.done = true;
    } else {
      errors->push_back(
          absl::StrCat("a line of a worker that never started: ", line));
    }
  }
  return out;
}

std::string Describe(const WorkerRecord& w) {
  return absl::StrFormat(
      "[node %s pid %d round %d rank %d (group %d/%d, local %d) world %d "
      "restarts %d start %.3f last %.3f%s]",
      w.node, w.pid, w.round, w.rank, w.group_rank, w.group_world_size,
      w.local_rank, w.world_size, w.restart_count, w.start, w.last_seen,
      w.done ? " done" : "");
}

// What the state machine promises about the rounds, checked on the workers'
// log. Returns the violations (empty: none).
std::vector<std::string> CheckHistory(const std::vector<WorkerRecord>& workers,
                                      int worker_kills) {
  std::vector<std::string> bad;
  std::map<int, std::vector<const WorkerRecord*>> rounds;
  for (const WorkerRecord& w : workers) rounds[w.round].push_back(&w);
  // Per round: one membership. Every worker of a round sees the same world
  // size, node count, restart count and master; the node count is within
  // min..max; ranks are the prefix sums of the nodes' workers (2 each), so
  // rank = group_rank * 2 + local_rank < world = 2 * nodes; no rank starts
  // twice in a round (a round is re-adopted or ends; it never restarts a
  // worker); each node has one group rank and each group rank one node.
  int previous_restarts = -1;
  for (const auto& [round, ws] : rounds) {
    const WorkerRecord& first = *ws.front();
    if (round < 1) bad.push_back(absl::StrCat("round ", round, " < 1"));
    if (first.group_world_size < kMinNodes || first.group_world_size > kNodes) {
      bad.push_back(absl::StrCat("round ", round, " has ",
                                 first.group_world_size, " nodes, not ",
                                 kMinNodes, "..", kNodes));
    }
    if (first.world_size != first.group_world_size * kProcsPerNode) {
      bad.push_back(absl::StrCat("round ", round, ": world size ",
                                 first.world_size, " is not the sum of its ",
                                 first.group_world_size, " nodes' workers"));
    }
    // Restart counts never go down, and only worker failures use restarts.
    if (first.restart_count < previous_restarts) {
      bad.push_back(absl::StrCat("round ", round, ": restart count ",
                                 first.restart_count, " below the ",
                                 previous_restarts, " of an earlier round"));
    }
    previous_restarts = first.restart_count;
    std::set<int> ranks;
    std::map<std::string, int> group_of_node;
    std::map<int, std::string> node_of_group;
    for (const WorkerRecord* w : ws) {
      if (w->world_size != first.world_size ||
          w->group_world_size != first.group_world_size ||
          w->restart_count != first.restart_count ||
          w->master != first.master) {
        bad.push_back(absl::StrCat("round ", round, ": ", Describe(*w),
                                   " disagrees with ", Describe(first),
                                   " (or the master: ", w->master, " vs ",
                                   first.master, ")"));
      }
      if (w->rank < 0 || w->rank >= w->world_size || w->local_rank < 0 ||
          w->local_rank >= kProcsPerNode || w->group_rank < 0 ||
          w->group_rank >= w->group_world_size ||
          w->rank != w->group_rank * kProcsPerNode + w->local_rank) {
        bad.push_back(absl::StrCat("ranks out of place: ", Describe(*w)));
      }
      if (!ranks.insert(w->rank).second) {
        bad.push_back(absl::StrCat("rank ", w->rank, " started twice in round ",
                                   round, ": ", Describe(*w)));
      }
      auto [g, new_node] = group_of_node.emplace(w->node, w->group_rank);
      auto [n, new_group] = node_of_group.emplace(w->group_rank, w->node);
      if (g->second != w->group_rank || n->second != w->node) {
        bad.push_back(absl::StrCat("round ", round,
                                   ": nodes and group ranks mixed up at ",
                                   Describe(*w)));
      }
    }
  }
  if (previous_restarts > std::min(kMaxRestarts, worker_kills)) {
    bad.push_back(absl::StrCat("restart count ", previous_restarts, " but ",
                               worker_kills, " workers were killed (max ",
                               kMaxRestarts, ")"));
  }
  // The last round ran to completion: every rank of it started and finished,
  // and no worker of another round finished (no round before it was
  // finishing: the finish file came last).
  if (!rounds.empty()) {
    const auto& [last, ws] = *rounds.rbegin();
    if (static_cast<int>(ws.size()) != ws.front()->world_size) {
      bad.push_back(absl::StrCat("the last round ", last, " started ",
                                 ws.size(), " of ", ws.front()->world_size,
                                 " workers"));
    }
    for (const WorkerRecord* w : ws)
      if (!w->done) bad.push_back("did not finish: " + Describe(*w));
  }
  for (const WorkerRecord& w : workers) {
    if (w.done && w.round != rounds.rbegin()->first)
      bad.push_back("finished in an earlier round: " + Describe(w));
  }
  // Per node: rounds only go up, and no two rounds' workers run at once: a
  // worker of a later round starts after every worker of an earlier round on
  // that node was last seen (the agent stops a round's workers, or they die
  // with their agent, before the next round's start).
  std::map<std::string, std::vector<const WorkerRecord*>> nodes;
  for (const WorkerRecord& w : workers) nodes[w.node].push_back(&w);
  for (auto& [node, ws] : nodes) {
    std::sort(ws.begin(), ws.end(),
              [](const WorkerRecord* a, const WorkerRecord* b) {
                return a->start < b->start;
              });
    for (size_t i = 0; i < ws.size(); ++i) {
      for (size_t j = i + 1; j < ws.size(); ++j) {
        if (ws[j]->round < ws[i]->round) {
          bad.push_back(absl::StrCat("node ", node,
                                     ": round went down: ", Describe(*ws[i]),
                                     " then ", Describe(*ws[j])));
        } else if (ws[j]->round > ws[i]->round &&
                   ws[i]->last_seen >= ws[j]->start) {
          bad.push_back(absl::StrCat(
              "node ", node, ": two rounds at once: ", Describe(*ws[i]),
              " still ran when ", Describe(*ws[j]), " started"));
        }
      }
    }
  }
  return bad;
}

// The pids of live processes whose environment holds mark (zombies have
// none), other than this one.
std::vector<pid_t> MarkedProcesses(const std::string& mark) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid) ||
        pid == getpid())
      continue;
    std::ifstream in(entry.path() / "environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
    for (absl::string_view var : absl::StrSplit(env, '\0')) {
      if (var == mark) {
        out.push_back(pid);
        break;
      }
    }
  }
  return out;
}

std::string Tail(const std::string& text, size_t n = 3000) {
  return text.size() <= n ? text : "..." + text.substr(text.size() - n);
}

class Chaos {
 public:
  // replicated: two musterd replicas over a 3-member etcd cluster instead of
  // one musterd with --state-dir; "musterd kills" kill the leader.
  explicit Chaos(bool replicated = false) : replicated_(replicated) {
    const char* seed = std::getenv("MUSTER_CHAOS_SEED");
    seed_ = seed != nullptr && *seed != '\0' ? std::strtoull(seed, nullptr, 10)
                                             : std::random_device{}();
    const char* secs = std::getenv("MUSTER_CHAOS_SECONDS");
    if (secs != nullptr && *secs != '\0')
      chaos_ = absl::Seconds(std::max(1, std::atoi(secs)));
    rng_.seed(seed_);
    dir_ = testing::MakeTempDir("chaos");
    log_ = dir_ + "/workers.log";
    finish_ = dir_ + "/finish";
    mark_ = absl::StrCat(kMarkName, "=", getpid(), "-", seed_, "-",
                         absl::ToUnixMicros(absl::Now()));
    std::ofstream(dir_ + "/worker.sh") << kWorkerScript;
    std::filesystem::permissions(dir_ + "/worker.sh",
                                 std::filesystem::perms::owner_all);
    std::cout << "chaos: seed " << seed_ << " (MUSTER_CHAOS_SEED=" << seed_
              << " reproduces it), " << chaos_ << " of chaos, files in " << dir_
              << std::endl;
    const int replicas = replicated_ ? 2 : 1;
    for (int i = 0; i < replicas; ++i) ports_.push_back(testing::FreePort());
    musterds_.resize(replicas);
    if (replicated_) etcd_ = std::make_unique<testing::EtcdCluster>(3);
    agents_.resize(kNodes);
    replace_at_.assign(kNodes, absl::InfiniteFuture());
  }

  // Whatever happened: no process of the test outlives it.
  ~Chaos() {
    for (auto& a : agents_)
      if (a) a->Kill();
    for (auto& m : musterds_)
      if (m) m->Kill();
    for (int i = 0; i < 50; ++i) {
      std::vector<pid_t> left = MarkedProcesses(mark_);
      if (left.empty()) break;
      for (pid_t p : left) kill(p, SIGKILL);
      absl::SleepFor(absl::Milliseconds(100));
    }
  }

  std::string mark_value() const { return mark_.substr(mark_.find('=') + 1); }

  // Starts musterd (replica i).
  bool StartMusterd(int i = 0) {
    if (musterds_[i]) {
      log_text_ += absl::StrCat("musterd ", i, ":\n",
                                Tail(musterds_[i]->Output()), "\n");
      retired_musterds_.push_back(std::move(musterds_[i]));
    }
    std::vector<std::string> argv = {
        BinPath("musterd"), absl::StrCat("--listen=127.0.0.1:", ports_[i])};
    if (replicated_) {
      argv.push_back("--etcd-endpoints=" + etcd_->Endpoints());
    } else {
      argv.push_back("--state-dir=" + dir_ + "/state");
    }
    musterds_[i] = std::make_unique<Subprocess>(
        argv, std::map<std::string, std::string>{{kMarkName, mark_value()}});
    if (musterds_[i]->WaitForOutput("listening", absl::Seconds(30)))
      return true;
    ADD_FAILURE() << "musterd " << i << " did not listen in 30 s:\n"
                  << Tail(musterds_[i]->Output(), 3000);
    return false;
  }

  // The replica that leads (by the key in etcd), or 0 for a single musterd.
  int Leader() {
    if (!replicated_) return 0;
    const std::string key = etcd_->Get("/muster/leader");
    for (size_t i = 0; i < ports_.size(); ++i) {
      if (absl::StrContains(key, absl::StrCat("127.0.0.1:", ports_[i], "\n")))
        return static_cast<int>(i);
    }
    return 0;
  }

  // "re-adopted" lines in the output of every musterd so far (the ones
  // killed and replaced included, so the count never goes down).
  size_t Adoptions() {
    size_t n = 0;
    for (const auto* list : {&musterds_, &retired_musterds_}) {
      for (const auto& m : *list)
        if (m) n += testing::LinesWith(m->Output(), "re-adopted").size();
    }
    return n;
  }

  std::string RdzvEndpoint() const {
    std::vector<std::string> list;
    for (int p : ports_) list.push_back(absl::StrCat("127.0.0.1:", p));
    return absl::StrJoin(list, ",");
  }

  void StartAgent(int node) {
    std::map<std::string, std::string> env = testing::EnvWithoutLauncher();
    env[kMarkName] = mark_value();
    env["CHAOS_NODE"] = absl::StrCat("n", node);
    env["CHAOS_LOG"] = log_;
    env["CHAOS_FINISH"] = finish_;
    if (agents_[node]) {
      retired_.push_back(std::move(agents_[node]));
    }
    agents_[node] = std::make_unique<Subprocess>(
        std::vector<std::string>{
            BinPath("muster"),
            absl::StrCat("--nnodes=", kMinNodes, ":", kNodes),
            absl::StrCat("--nproc-per-node=", kProcsPerNode),
            absl::StrCat("--max-restarts=", kMaxRestarts),
            "--rdzv-backend=c10d", "--rdzv-endpoint=" + RdzvEndpoint(),
            "--rdzv-id=chaos", "--rdzv-conf=last_call_timeout=1", "--no-python",
            dir_ + "/worker.sh"},
        env);
    replace_at_[node] = absl::InfiniteFuture();
    Note(absl::StrCat("agent n", node, " started (pid ", agents_[node]->pid(),
                      ")"));
  }

  std::vector<WorkerRecord> Workers() {
    return ReadWorkers(log_, &log_errors_);
  }

  // The settled state: every node has its agent, the last round has all 3
  // nodes and its 6 workers run. Returns that round, or 0.
  int SettledRound() {
    for (int n = 0; n < kNodes; ++n)
      if (!agents_[n] || !agents_[n]->Running()) return 0;
    std::vector<std::string> ignored;
    std::vector<WorkerRecord> ws = ReadWorkers(log_, &ignored);
    int last = 0;
    for (const auto& w : ws) last = std::max(last, w.round);
    int running = 0;
    for (const auto& w : ws) {
      if (w.round != last) continue;
      if (w.group_world_size != kNodes || !ProcessAlive(w.pid)) return 0;
      ++running;
    }
    return running == kNodes * kProcsPerNode ? last : 0;
  }
  bool Settled() { return SettledRound() > 0; }

  // Waits (replacing killed agents) until the job is settled in the same
  // round for a second: a worker killed a moment ago may not look dead yet.
  bool AwaitSettled(absl::Duration timeout) {
    int seen = 0;
    absl::Time since = absl::InfiniteFuture();
    return WaitUntil(
        [&] {
          Supervise();
          const int round = SettledRound();
          if (round == 0 || round != seen) {
            seen = round;
            since = absl::Now();
            return false;
          }
          return absl::Now() - since >= absl::Seconds(1);
        },
        timeout);
  }

  // How many times an agent fenced its workers (its lease ran out).
  int Fences() {
    int n = 0;
    for (const auto* list : {&agents_, &retired_}) {
      for (const auto& a : *list) {
        if (a)
          n += static_cast<int>(
              testing::LinesWith(a->Output(), "lease fence: musterd").size());
      }
    }
    return n;
  }

  // Live workers of the test (by their log and their marker).
  std::vector<pid_t> LiveWorkers() {
    std::vector<std::string> ignored;
    std::vector<pid_t> out;
    const std::vector<pid_t> marked = MarkedProcesses(mark_);
    for (const auto& w : ReadWorkers(log_, &ignored)) {
      if (!w.done &&
          std::find(marked.begin(), marked.end(), w.pid) != marked.end())
        out.push_back(w.pid);
    }
    return out;
  }

  void Note(const std::string& what) {
    const std::string line = absl::StrFormat(
        "%.3f %s", absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()),
        what);
    std::cout << "chaos: " << line << std::endl;
    events_ += line + "\n";
  }

  double Uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng_);
  }
  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

  // Starts the replacements that are due. An agent that exited without
  // being killed (during the chaos or the settling after it) is a failure;
  // it is replaced too, so that the rest of the run still tells something.
  void Supervise() {
    // A replica that gave up its leadership exits (75); a supervisor
    // (systemd, Kubernetes) starts it again.
    for (size_t i = 0; replicated_ && i < musterds_.size(); ++i) {
      if (musterds_[i] && !musterds_[i]->Running()) {
        Note(absl::StrCat("musterd ", i, " exited by itself with ",
                          musterds_[i]->Wait(absl::ZeroDuration()).value_or(-1),
                          "; started again"));
        StartMusterd(static_cast<int>(i));
      }
    }
    for (int n = 0; n < kNodes; ++n) {
      if (replace_at_[n] == absl::InfiniteFuture() && agents_[n] &&
          !agents_[n]->Running()) {
        ADD_FAILURE() << "agent n" << n << " exited by itself with "
                      << agents_[n]->Wait(absl::ZeroDuration()).value_or(-1)
                      << ":\n"
                      << Tail(agents_[n]->Output(), 6000);
        Note(absl::StrCat("agent n", n, " exited by itself"));
        replace_at_[n] = absl::Now();
      }
      if (absl::Now() >= replace_at_[n]) StartAgent(n);
    }
  }

  void KillWorker() {
    std::vector<pid_t> live = LiveWorkers();
    if (live.empty()) return;
    pid_t p = live[Pick(static_cast<int>(live.size()))];
    kill(p, SIGKILL);
    ++worker_kills_;
    Note(absl::StrCat("kill -9 worker ", p));
  }

  // Never the last live agent: a job whose every agent is gone is forgotten
  // (coordinator.h), and the next agent would start it afresh at round 1.
  void KillAgent() {
    std::vector<int> alive;
    for (int n = 0; n < kNodes; ++n)
      if (agents_[n] && agents_[n]->Running()) alive.push_back(n);
    if (alive.size() < 2) return;
    const int n = alive[Pick(static_cast<int>(alive.size()))];
    const pid_t pid = agents_[n]->pid();
    agents_[n]->Kill();  // its process group: the agent alone
    ++agent_kills_;
    replace_at_[n] = absl::Now() + absl::Seconds(Uniform(0.2, 2.0));
    Note(absl::StrCat("kill -9 agent n", n, " (pid ", pid, ")"));
  }

  // kill -9 musterd (the leader), a new one on the same port after `delay`.
  bool RestartMusterd(absl::Duration delay) {
    const int i = Leader();
    musterds_[i]->Kill();
    ++musterd_kills_;
    Note(absl::StrCat("kill -9 musterd ", i, ", restart in ",
                      absl::FormatDuration(delay)));
    absl::SleepFor(delay);
    return StartMusterd(i);
  }

  // A musterd restart within 0.3 s while the round is settled: musterd
  // re-adopts the round, and no worker starts or is fenced until well past
  // the time an unrenewed lease would have fenced (0.7 lease = 3.5 s).
  // Returns false (and a failure) when it did not.
  bool CleanMusterdRestart() {
    if (!AwaitSettled(absl::Seconds(60))) {
      ADD_FAILURE() << "the job did not settle (3 nodes, 6 workers) in 60 s";
      return false;
    }
    std::vector<std::string> ignored;
    const size_t starts_before = ReadWorkers(log_, &ignored).size();
    const int fences_before = Fences();
    const size_t adoptions_before = Adoptions();
    const absl::Time killed = absl::Now();
    if (!RestartMusterd(absl::Seconds(Uniform(0.0, 0.3)))) {
      ADD_FAILURE() << "musterd did not start again";
      return false;
    }
    ++clean_restarts_;
    const bool adopted = WaitUntil(
        [&] { return Adoptions() > adoptions_before; }, absl::Seconds(20));
    absl::SleepFor(killed + absl::Seconds(5) - absl::Now());
    const size_t starts_after = ReadWorkers(log_, &ignored).size();
    const int fences = Fences() - fences_before;
    Note(absl::StrCat("musterd restarted while settled: ",
                      adopted ? "re-adopted" : "NOT re-adopted", ", ",
                      starts_after - starts_before, " workers started, ",
                      fences, " fenced in 5 s"));
    EXPECT_TRUE(adopted) << Diagnostics();
    EXPECT_EQ(starts_after, starts_before)
        << "a musterd restart shorter than the lease restarted workers";
    EXPECT_EQ(fences, 0) << "an agent fenced after a short musterd restart";
    return adopted && starts_after == starts_before && fences == 0;
  }

  void Run() {
    if (replicated_) {
      ASSERT_TRUE(etcd_->ok()) << etcd_->Logs();
    }
    for (size_t i = 0; i < musterds_.size(); ++i) {
      ASSERT_TRUE(StartMusterd(static_cast<int>(i))) << Diagnostics();
    }
    for (int n = 0; n < kNodes; ++n) StartAgent(n);
    ASSERT_TRUE(WaitUntil([&] { return Settled(); }, absl::Seconds(60)))
        << Diagnostics();

    const absl::Time end = absl::Now() + chaos_;
    while (absl::Now() < end) {
      absl::Time next = absl::Now() + absl::Seconds(Uniform(0.3, 2.5));
      while (absl::Now() < next) {
        Supervise();
        absl::SleepFor(absl::Milliseconds(50));
      }
      const double r = Uniform(0, 1);
      if (r < 0.45) {
        KillWorker();
      } else if (r < 0.8) {
        KillAgent();
      } else if (r < 0.9) {
        ASSERT_TRUE(RestartMusterd(absl::Seconds(Uniform(0.0, 1.5))))
            << Diagnostics();
      } else {
        ASSERT_TRUE(CleanMusterdRestart()) << Diagnostics();
      }
    }
    // Always check a settled restart at least once.
    if (clean_restarts_ == 0) {
      ASSERT_TRUE(CleanMusterdRestart()) << Diagnostics();
    }
    Note("chaos over");

    // The end: every node back, the job settles at 3 nodes, then finishes.
    ASSERT_TRUE(AwaitSettled(absl::Seconds(60)))
        << "the job did not settle after the chaos\n"
        << Diagnostics();
    std::ofstream(finish_) << "finish\n";
    Note("finish file written");
    for (int n = 0; n < kNodes; ++n) {
      const int rc = agents_[n]->WaitOrKill(absl::Seconds(90));
      EXPECT_EQ(rc, 0) << "agent n" << n << ":\n"
                       << Tail(agents_[n]->Output(), 6000);
    }
    for (auto& m : musterds_) {
      m->Signal(SIGTERM);
      m->WaitOrKill(absl::Seconds(20));
    }

    // 0 orphans: everything with the mark is gone (the job keepers and the
    // workers included) once the agents and musterd exited.
    std::vector<pid_t> left;
    WaitUntil([&] { return (left = MarkedProcesses(mark_)).empty(); },
              absl::Seconds(10));
    EXPECT_TRUE(left.empty())
        << "orphan processes: " << absl::StrJoin(left, " ");

    std::vector<WorkerRecord> workers = Workers();
    EXPECT_TRUE(log_errors_.empty()) << absl::StrJoin(log_errors_, "\n");
    const std::vector<std::string> bad = CheckHistory(workers, worker_kills_);
    EXPECT_TRUE(bad.empty()) << absl::StrJoin(bad, "\n") << "\n"
                             << Diagnostics();
    std::set<int> rounds;
    for (const auto& w : workers) rounds.insert(w.round);
    std::cout << "chaos: seed " << seed_ << ": " << worker_kills_
              << " worker kills, " << agent_kills_ << " agent kills, "
              << musterd_kills_ << " musterd kills (" << clean_restarts_
              << " while settled), " << Fences() << " lease fences, "
              << rounds.size() << " rounds, " << workers.size()
              << " worker starts, last round "
              << (rounds.empty() ? 0 : *rounds.rbegin()) << std::endl;
  }

  std::string Diagnostics() {
    std::string out = "seed " + std::to_string(seed_) + "\nevents:\n" +
                      events_ + "\n" + log_text_;
    for (size_t i = 0; i < musterds_.size(); ++i) {
      if (musterds_[i])
        out += absl::StrCat("musterd ", i, ":\n",
                            Tail(musterds_[i]->Output(), 6000), "\n");
    }
    for (int n = 0; n < kNodes; ++n) {
      if (agents_[n])
        out +=
            absl::StrCat("agent n", n, ":\n", Tail(agents_[n]->Output()), "\n");
    }
    out += "workers' log: " + log_ + "\n";
    return out;
  }

 private:
  uint64_t seed_ = 0;
  absl::Duration chaos_ = absl::Seconds(60);
  std::mt19937_64 rng_;
  std::string dir_, log_, finish_, mark_;
  const bool replicated_;
  std::vector<int> ports_;
  std::unique_ptr<testing::EtcdCluster> etcd_;
  std::vector<std::unique_ptr<Subprocess>> musterds_;
  std::vector<std::unique_ptr<Subprocess>> retired_musterds_;
  std::vector<std::unique_ptr<Subprocess>> agents_;
  std::vector<std::unique_ptr<Subprocess>> retired_;
  std::vector<absl::Time> replace_at_;
  std::vector<std::string> log_errors_;
  std::string events_, log_text_;
  int worker_kills_ = 0, agent_kills_ = 0, musterd_kills_ = 0;
  int clean_restarts_ = 0;
};

TEST(ChaosE2eTest, RandomKillsOfWorkersAgentsAndMusterdKeepTheStateMachine) {
  Chaos chaos;
  chaos.Run();
}

// The same chaos on replicated musterd (issue 25): two replicas over a
// 3-member etcd cluster, and each musterd kill is a kill -9 of the leader
// (started again as a standby); a kill while settled must restart no worker.
TEST(ChaosE2eTest, RandomKillsWithMusterdReplicasKeepTheStateMachine) {
  ASSERT_FALSE(testing::EtcdCluster::Binary().empty())
      << "no etcd binary: apt-get install etcd-server";
  Chaos chaos(/*replicated=*/true);
  chaos.Run();
}

}  // namespace
}  // namespace muster
