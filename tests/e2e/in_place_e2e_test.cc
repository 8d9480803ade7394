// --recovery=in-place end to end (issue 26): a real musterd and real `muster`
// agents on loopback, each its own node, running control_worker
// (tests/workers/control_worker.cc), which writes `hello` into its control
// directory as libmuster_comm does and records every `round` it sees in
// <out>/<pid>.log. Each agent gets its own <out>, so a test knows which node's
// processes saw what. Every wait is on a condition with a generous deadline.
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/files.h"
#include "tests/testing/musterd.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/wait.h"

namespace muster {
namespace {

using ::muster::testing::BinPath;
using ::muster::testing::MakeTempDir;
using ::muster::testing::MusterdProcess;
using ::muster::testing::ProcessAlive;
using ::muster::testing::ReadLines;
using ::muster::testing::Subprocess;
using ::muster::testing::WaitUntil;
using ::testing::ElementsAre;

constexpr absl::Duration kDeadline = absl::Seconds(60);

// What one worker process recorded.
struct WorkerLog {
  long pid = 0;
  std::map<std::string, std::string> start;  // its `start` line's fields
  // Its `round` lines' fields, in order.
  std::vector<std::map<std::string, std::string>> rounds;
  const std::map<std::string, std::string>* LastRound() const {
    return rounds.empty() ? nullptr : &rounds.back();
  }
};

std::map<std::string, std::string> Fields(const std::string& line) {
  static const std::regex kField(R"((\w+)=(\S*))");
  std::map<std::string, std::string> out;
  for (auto it = std::sregex_iterator(line.begin(), line.end(), kField);
       it != std::sregex_iterator(); ++it) {
    out[(*it)[1]] = (*it)[2];
  }
  return out;
}

// Every worker process that started with `out` as its --out, by pid.
std::map<long, WorkerLog> ReadLogs(const std::string& out) {
  std::map<long, WorkerLog> logs;
  for (const auto& e : std::filesystem::directory_iterator(out)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".log") continue;
    WorkerLog log;
    log.pid = std::stol(name);
    // Only whole lines (a line being written lacks its last field), and
    // only processes whose start line is there.
    for (const std::string& line : ReadLines(e.path().string())) {
      if (line.rfind("start ", 0) == 0 && line.find(" control=") != line.npos)
        log.start = Fields(line);
      if (line.rfind("round ", 0) == 0 && line.find(" restart=") != line.npos)
        log.rounds.push_back(Fields(line));
    }
    if (!log.start.empty()) logs[log.pid] = std::move(log);
  }
  return logs;
}

// Whether every process in `logs` last saw `running` with this world size.
bool AllRunningWith(const std::map<long, WorkerLog>& logs, int world) {
  for (const auto& [pid, log] : logs) {
    const auto* r = log.LastRound();
    if (r == nullptr || r->at("state") != "running" ||
        r->at("world") != absl::StrCat(world))
      return false;
  }
  return true;
}

// Waits (up to `deadline`) until each node's output folder in `outs` holds
// two workers that last saw `running` with this world size; logs[i] gets what
// was read from outs[i] last. Returns whether they did.
bool WaitTwoRunningOnEach(const std::vector<std::string>& outs, int world,
                          const std::vector<std::map<long, WorkerLog>*>& logs,
                          absl::Duration deadline) {
  return WaitUntil(
      [&] {
        bool all = true;
        for (size_t i = 0; i < outs.size(); ++i) {
          *logs[i] = ReadLogs(outs[i]);
          all = all && logs[i]->size() == 2 && AllRunningWith(*logs[i], world);
        }
        return all;
      },
      deadline);
}

std::string Dump(const std::vector<std::string>& outs) {
  std::string s;
  for (const std::string& out : outs) {
    absl::StrAppend(&s, out, ":\n");
    for (const auto& e : std::filesystem::directory_iterator(out)) {
      if (e.path().extension() != ".log") continue;
      for (const std::string& line : ReadLines(e.path().string()))
        absl::StrAppend(&s, "  ", e.path().filename().string(), ": ", line,
                        "\n");
    }
  }
  return s;
}

class InPlaceE2eTest : public ::testing::Test {
 protected:
  // An agent of `job` whose workers record into a fresh directory (returned
  // in *out).
  std::unique_ptr<Subprocess> StartAgent(const std::string& job,
                                         const std::string& nnodes,
                                         int max_restarts, std::string* out,
                                         std::vector<std::string> extra = {}) {
    *out = MakeTempDir("inplace-" + job);
    outs_.push_back(*out);
    std::vector<std::string> argv = {
        BinPath("muster"),
        "--nnodes=" + nnodes,
        "--nproc-per-node=2",
        absl::StrCat("--max-restarts=", max_restarts),
        "--recovery=in-place",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=" + server_.endpoint(),
        "--rdzv-id=" + job,
        "--rdzv-conf=" + testing::FastRdzvConf(),
        "--no-python",
        BinPath("control_worker"),
        "--out=" + *out};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<Subprocess>(argv);
  }

  void SetUp() override {
    ASSERT_TRUE(server_.ready()) << server_.proc().Output();
  }

  // Ends the job: every worker exits 0.
  void Finish() {
    for (const std::string& out : outs_) std::ofstream(out + "/done").close();
  }

  void TearDown() override {
    Finish();
    // No worker outlives its test.
    for (const std::string& out : outs_) {
      for (const auto& [pid, log] : ReadLogs(out)) {
        EXPECT_TRUE(
            WaitUntil([&] { return !ProcessAlive(pid); }, absl::Seconds(15)))
            << "worker " << pid << " of " << out << " outlived its test";
      }
    }
  }

  MusterdProcess server_;
  std::vector<std::string> outs_;
};

// Ranks of kept workers in their previous order: the survivors' processes
// sorted by the rank they had, and the ranks they have now.
std::vector<int> NewRanksInPreviousOrder(
    const std::vector<const std::map<long, WorkerLog>*>& nodes,
    const std::map<long, int>& previous) {
  std::vector<std::pair<int, int>> by_previous;  // (previous, now)
  for (const auto* logs : nodes) {
    for (const auto& [pid, log] : *logs) {
      by_previous.emplace_back(previous.at(pid),
                               std::stoi(log.LastRound()->at("rank")));
    }
  }
  std::sort(by_previous.begin(), by_previous.end());
  std::vector<int> now;
  for (const auto& [p, n] : by_previous) now.push_back(n);
  return now;
}

// (a) kill -9 of one agent of three: the four surviving worker processes
// (the same pids) see `running` with world size 4, ranks 0..3 in their
// previous order; no process starts again. (b) A fourth node joins: the
// survivors see world size 6 and the newcomer's workers start as ranks 4, 5.
TEST_F(InPlaceE2eTest, ALostNodeShrinksInPlaceAndANewNodeGrowsItBack) {
  std::string out_a, out_b, out_c, out_d;
  auto a = StartAgent("shrink", "1:3", 0, &out_a);
  auto b = StartAgent("shrink", "1:3", 0, &out_b);
  auto c = StartAgent("shrink", "1:3", 0, &out_c);
  std::map<long, WorkerLog> la, lb, lc;
  ASSERT_TRUE(WaitTwoRunningOnEach({out_a, out_b, out_c}, 6, {&la, &lb, &lc},
                                   kDeadline))
      << Dump(outs_);
  std::map<long, int> first_rank;
  for (const auto* logs : {&la, &lb, &lc}) {
    for (const auto& [pid, log] : *logs) {
      EXPECT_EQ(log.start.at("control"), "1");
      EXPECT_EQ(log.start.at("rank"), log.LastRound()->at("rank"));
      first_rank[pid] = std::stoi(log.LastRound()->at("rank"));
    }
  }

  c->Signal(SIGKILL);  // kill -9 of the agent; its workers die with it
  ASSERT_TRUE(c->Wait(kDeadline).has_value());
  ASSERT_TRUE(WaitUntil(
      [&] {
        la = ReadLogs(out_a), lb = ReadLogs(out_b);
        return AllRunningWith(la, 4) && AllRunningWith(lb, 4);
      },
      kDeadline))
      << Dump(outs_) << a->Output() << b->Output();
  // The same processes: none started again.
  EXPECT_EQ(la.size(), 2u);
  EXPECT_EQ(lb.size(), 2u);
  EXPECT_THAT(NewRanksInPreviousOrder({&la, &lb}, first_rank),
              ElementsAre(0, 1, 2, 3))
      << Dump(outs_);
  for (const auto* logs : {&la, &lb}) {
    for (const auto& [pid, log] : *logs) {
      EXPECT_TRUE(ProcessAlive(pid));
      // `changing` (seq 2) came between the two rounds, though a poll may
      // have missed it; a lost node uses no restart.
      EXPECT_EQ(log.LastRound()->at("seq"), "3") << Dump(outs_);
      EXPECT_EQ(log.LastRound()->at("restart"), "0");
    }
  }
  std::map<long, int> second_rank;
  for (const auto* logs : {&la, &lb}) {
    for (const auto& [pid, log] : *logs)
      second_rank[pid] = std::stoi(log.LastRound()->at("rank"));
  }

  auto d = StartAgent("shrink", "1:3", 0, &out_d);
  std::map<long, WorkerLog> ld;
  ASSERT_TRUE(WaitUntil(
      [&] {
        la = ReadLogs(out_a), lb = ReadLogs(out_b), ld = ReadLogs(out_d);
        return ld.size() == 2 && AllRunningWith(la, 6) &&
               AllRunningWith(lb, 6) && AllRunningWith(ld, 6);
      },
      kDeadline))
      << Dump(outs_) << a->Output() << b->Output() << d->Output();
  EXPECT_EQ(la.size(), 2u);
  EXPECT_EQ(lb.size(), 2u);
  EXPECT_THAT(NewRanksInPreviousOrder({&la, &lb}, second_rank),
              ElementsAre(0, 1, 2, 3));
  std::vector<int> newcomer_ranks;
  for (const auto& [pid, log] : ld)
    newcomer_ranks.push_back(std::stoi(log.start.at("rank")));
  std::sort(newcomer_ranks.begin(), newcomer_ranks.end());
  EXPECT_THAT(newcomer_ranks, ElementsAre(4, 5));

  Finish();
  for (Subprocess* p : {a.get(), b.get(), d.get()})
    EXPECT_EQ(p->WaitOrKill(kDeadline), 0) << p->Output();
}

// (c) Workers that never write `hello` are restarted as under
// --recovery=restart: the survivor of a lost node starts new processes.
TEST_F(InPlaceE2eTest, PlainWorkersAreRestarted) {
  std::string out_a, out_b;
  auto a = StartAgent("plain", "1:2", 0, &out_a, {"--no-hello"});
  auto b = StartAgent("plain", "1:2", 0, &out_b, {"--no-hello"});
  std::map<long, WorkerLog> la, lb;
  ASSERT_TRUE(WaitTwoRunningOnEach({out_a, out_b}, 4, {&la, &lb}, kDeadline))
      << Dump(outs_);
  b->Signal(SIGKILL);
  ASSERT_TRUE(b->Wait(kDeadline).has_value());
  // Two new processes on a, in a round of 2; the first two are gone.
  ASSERT_TRUE(WaitUntil(
      [&] {
        la = ReadLogs(out_a);
        int new_ones = 0;
        for (const auto& [pid, log] : la) {
          const auto* r = log.LastRound();
          new_ones += r != nullptr && log.start.at("world") == "2" &&
                      r->at("state") == "running" && r->at("world") == "2";
        }
        return la.size() == 4 && new_ones == 2;
      },
      kDeadline))
      << Dump(outs_) << a->Output();
  for (const auto& [pid, log] : la) {
    // Told nothing but its first round: it never opened the channel.
    for (const auto& r : log.rounds) EXPECT_EQ(r.at("state"), "running");
  }
  Finish();
  EXPECT_EQ(a->WaitOrKill(kDeadline), 0) << a->Output();
}

// (d) A worker failure under in-place restarts that node's workers only (they
// join as newcomers, after the node that kept its workers) and counts a
// restart.
TEST_F(InPlaceE2eTest, AWorkerFailureRestartsItsNodeOnly) {
  std::string out_a, out_b;
  auto a = StartAgent("wfail", "1:2", 1, &out_a);
  auto b = StartAgent("wfail", "1:2", 1, &out_b);
  std::map<long, WorkerLog> la, lb;
  ASSERT_TRUE(WaitTwoRunningOnEach({out_a, out_b}, 4, {&la, &lb}, kDeadline))
      << Dump(outs_);
  // Fail a worker of the node that is group rank 0: b is then the keeper
  // and comes first.
  const bool a_first = la.begin()->second.LastRound()->at("group") == "0";
  const std::string failing_out = a_first ? out_a : out_b;
  const std::string keeping_out = a_first ? out_b : out_a;
  const std::map<long, WorkerLog> kept_before = a_first ? lb : la;
  std::ofstream(
      absl::StrCat(failing_out, "/fail.", ReadLogs(failing_out).begin()->first))
      .close();
  std::map<long, WorkerLog> kept, restarted;
  ASSERT_TRUE(WaitUntil(
      [&] {
        kept = ReadLogs(keeping_out);
        restarted.clear();
        for (auto& [pid, log] : ReadLogs(failing_out)) {
          if (log.start.at("restart") == "1") restarted[pid] = log;
        }
        return restarted.size() == 2 && AllRunningWith(kept, 4) &&
               AllRunningWith(restarted, 4) &&
               kept.begin()->second.LastRound()->at("restart") == "1";
      },
      kDeadline))
      << Dump(outs_) << a->Output() << b->Output();
  // The keeper's processes are the same, now ranks 0..1; the restarted
  // node's new ones are 2..3.
  ASSERT_EQ(kept.size(), 2u);
  for (const auto& [pid, log] : kept) {
    EXPECT_TRUE(kept_before.contains(pid));
    EXPECT_EQ(log.LastRound()->at("group"), "0");
  }
  for (const auto& [pid, log] : restarted)
    EXPECT_EQ(log.LastRound()->at("group"), "1");
  Finish();
  for (Subprocess* p : {a.get(), b.get()})
    EXPECT_EQ(p->WaitOrKill(kDeadline), 0) << p->Output();
}

}  // namespace
}  // namespace muster
