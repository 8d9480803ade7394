// In-place recovery end to end (issue 26's done criteria): a real musterd and
// `muster --recovery=in-place` agents on loopback, each a node of two `train`
// workers. kill -9 of one agent leaves the survivors' workers running: they
// print `recovered: ... of 4` in the same processes (the pids of their
// `start:` lines), none is started again; a node joining grows the job back
// to 6 and rank 0 prints `all 6 ranks agree on the parameters`. Also a second
// loss while the survivors recover, and a worker failure (its node's workers
// restarted, the others kept). Every wait has a deadline; agents are killed
// with their process groups when a test ends.
#include <signal.h>

#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/musterd.h"
#include "tests/testing/subprocess.h"

namespace muster {
namespace {

using ::muster::testing::AllExited;
using ::muster::testing::BinPath;
using ::muster::testing::LinesWith;
using ::muster::testing::MusterdProcess;
using ::muster::testing::Subprocess;
using ::muster::testing::WaitUntil;
using ::testing::HasSubstr;

constexpr absl::Duration kFormDeadline = absl::Seconds(60);
constexpr absl::Duration kJobDeadline = absl::Seconds(120);

// A node: an agent of two train workers under --recovery=in-place.
std::unique_ptr<Subprocess> StartNode(const MusterdProcess& server,
                                      const std::string& job,
                                      const std::string& nnodes,
                                      int max_restarts = 0, int epochs = 1500) {
  return std::make_unique<Subprocess>(std::vector<std::string>{
      BinPath("muster"), "--nnodes=" + nnodes, "--nproc-per-node=2",
      absl::StrCat("--max-restarts=", max_restarts), "--rdzv-backend=c10d",
      "--rdzv-endpoint=" + server.endpoint(), "--rdzv-id=" + job,
      "--rdzv-conf=" + testing::FastRdzvConf(0.5), "--recovery=in-place",
      "--prefix-output", "--no-python", BinPath("train"),
      absl::StrCat("--epochs=", epochs), "--step-ms=10"});
}

// The workers' `start: rank R of W pid P` lines in an agent's output: pid ->
// "R of W" (the first start of each pid).
std::map<int, std::string> Starts(const std::string& output) {
  static const std::regex kStart(R"(start: rank (\d+) of (\d+) pid (\d+))");
  std::map<int, std::string> starts;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), kStart);
       it != std::sregex_iterator(); ++it) {
    starts.emplace(std::stoi((*it)[3]),
                   absl::StrCat((*it)[1].str(), " of ", (*it)[2].str()));
  }
  return starts;
}

// How many lines of `output` say `recovered: rank ... of <world>`.
size_t RecoveredOf(const std::string& output, int world) {
  static const std::regex kRecovered(R"(recovered: rank \d+ of (\d+) )");
  size_t n = 0;
  for (const std::string& line : LinesWith(output, "recovered: ")) {
    std::smatch m;
    if (std::regex_search(line, m, kRecovered) && std::stoi(m[1]) == world) {
      ++n;
    }
  }
  return n;
}

// Waits until the agents' outputs hold `count` start lines of `world` in
// total.
bool WaitForStarts(const std::vector<Subprocess*>& agents, int world,
                   size_t count, absl::Duration timeout) {
  const std::string of = absl::StrCat(" of ", world);
  return WaitUntil(
      [&] {
        size_t n = 0;
        for (Subprocess* a : agents) {
          for (const auto& [pid, where] : Starts(a->Output())) {
            n += absl::EndsWith(where, of) ? 1 : 0;
          }
        }
        return n >= count;
      },
      timeout, absl::Milliseconds(20));
}

bool WaitForRecovered(const std::vector<Subprocess*>& agents, int world,
                      size_t count, absl::Duration timeout) {
  return WaitUntil(
      [&] {
        size_t n = 0;
        for (Subprocess* a : agents) n += RecoveredOf(a->Output(), world);
        return n >= count;
      },
      timeout, absl::Milliseconds(20));
}

std::string AllOutput(const std::vector<Subprocess*>& procs) {
  std::string out;
  for (size_t i = 0; i < procs.size(); ++i) {
    absl::StrAppend(&out, "\n----- agent ", i, " -----\n", procs[i]->Output());
  }
  return out;
}

std::vector<pid_t> Pids(const std::map<int, std::string>& starts) {
  std::vector<pid_t> pids;
  for (const auto& [pid, where] : starts) pids.push_back(pid);
  return pids;
}

// The done criteria: shrink by kill -9 of an agent, then grow back.
TEST(InPlaceTrainE2eTest,
     LostNodeCostsTheSurvivorsNoProcessAndANodeGrowsItBack) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready()) << server.proc().Output();
  auto a = StartNode(server, "inplace", "2:3");
  auto b = StartNode(server, "inplace", "2:3");
  auto c = StartNode(server, "inplace", "2:3");
  std::vector<Subprocess*> all = {a.get(), b.get(), c.get()};
  ASSERT_TRUE(WaitForStarts(all, 6, 6, kFormDeadline)) << AllOutput(all);
  const std::map<int, std::string> a_starts = Starts(a->Output());
  const std::map<int, std::string> b_starts = Starts(b->Output());
  const std::vector<pid_t> c_pids = Pids(Starts(c->Output()));
  ASSERT_EQ(a_starts.size(), 2u) << AllOutput(all);
  ASSERT_EQ(b_starts.size(), 2u) << AllOutput(all);

  const absl::Time killed_at = absl::Now();
  c->Signal(SIGKILL);
  c->Wait(absl::Seconds(10));
  EXPECT_TRUE(AllExited(c_pids, absl::Seconds(10)))
      << "the killed agent's workers outlived it";
  std::vector<Subprocess*> survivors = {a.get(), b.get()};
  ASSERT_TRUE(WaitForRecovered(survivors, 4, 4, kFormDeadline))
      << AllOutput(all);
  std::cerr << "kill -9 -> 4 survivors recovered: "
            << absl::FormatDuration(absl::Now() - killed_at)
            << " (as the test saw it)\n";
  // The same processes: no start line but the first two on each survivor.
  EXPECT_EQ(Starts(a->Output()), a_starts) << a->Output();
  EXPECT_EQ(Starts(b->Output()), b_starts) << b->Output();
  for (pid_t pid : Pids(a_starts)) EXPECT_TRUE(testing::ProcessAlive(pid));

  // A node joins: the job grows back to 6 and finishes.
  auto d = StartNode(server, "inplace", "2:3");
  all.push_back(d.get());
  ASSERT_TRUE(WaitForRecovered(survivors, 6, 4, kFormDeadline))
      << AllOutput(all);
  EXPECT_TRUE(WaitForStarts({d.get()}, 6, 2, kFormDeadline)) << AllOutput(all);
  for (Subprocess* p : {a.get(), b.get(), d.get()}) {
    EXPECT_EQ(p->WaitOrKill(kJobDeadline), 0) << AllOutput(all);
  }
  EXPECT_EQ(Starts(a->Output()), a_starts);
  EXPECT_EQ(Starts(b->Output()), b_starts);
  EXPECT_THAT(AllOutput({a.get(), b.get(), d.get()}),
              HasSubstr("all 6 ranks agree on the parameters"))
      << AllOutput(all);
}

// Two nodes lost one right after the other: the survivors' recovery meets
// the second loss and joins the round after it.
TEST(InPlaceTrainE2eTest, ASecondLossDuringARecovery) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready()) << server.proc().Output();
  std::vector<std::unique_ptr<Subprocess>> nodes;
  for (int i = 0; i < 4; ++i) {
    nodes.push_back(StartNode(server, "twice", "2:4", 0, 1000));
  }
  std::vector<Subprocess*> all;
  for (auto& n : nodes) all.push_back(n.get());
  ASSERT_TRUE(WaitForStarts(all, 8, 8, kFormDeadline)) << AllOutput(all);
  const std::map<int, std::string> a_starts = Starts(nodes[0]->Output());
  const std::map<int, std::string> b_starts = Starts(nodes[1]->Output());
  nodes[3]->Signal(SIGKILL);
  // The second loss as soon as a survivor is recovering.
  WaitUntil(
      [&] {
        return nodes[0]->Output().find("recovered: ") != std::string::npos ||
               nodes[0]->Output().find("lost") != std::string::npos;
      },
      absl::Seconds(10), absl::Milliseconds(1));
  nodes[2]->Signal(SIGKILL);
  std::vector<Subprocess*> survivors = {nodes[0].get(), nodes[1].get()};
  ASSERT_TRUE(WaitForRecovered(survivors, 4, 4, kFormDeadline))
      << AllOutput(all);
  for (Subprocess* p : survivors) {
    EXPECT_EQ(p->WaitOrKill(kJobDeadline), 0) << AllOutput(all);
  }
  EXPECT_EQ(Starts(nodes[0]->Output()), a_starts);
  EXPECT_EQ(Starts(nodes[1]->Output()), b_starts);
  // Rank 0 is on the survivor that held the lower ranks.
  EXPECT_THAT(AllOutput(survivors),
              HasSubstr("all 4 ranks agree on the parameters"))
      << AllOutput(all);
}

// A worker fails: its node's workers are started again (as newcomers, one
// restart counted), the other nodes keep theirs.
TEST(InPlaceTrainE2eTest, AWorkerFailureRestartsOnlyItsNode) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready()) << server.proc().Output();
  auto a = StartNode(server, "wfail", "3", 1);
  auto b = StartNode(server, "wfail", "3", 1);
  auto c = StartNode(server, "wfail", "3", 1);
  std::vector<Subprocess*> all = {a.get(), b.get(), c.get()};
  ASSERT_TRUE(WaitForStarts(all, 6, 6, kFormDeadline)) << AllOutput(all);
  const std::map<int, std::string> a_starts = Starts(a->Output());
  const std::map<int, std::string> c_starts = Starts(c->Output());
  const std::vector<pid_t> b_pids = Pids(Starts(b->Output()));
  ASSERT_EQ(b_pids.size(), 2u);
  ASSERT_EQ(kill(b_pids[0], SIGKILL), 0);
  // b's workers start again; a's and c's recover in place.
  ASSERT_TRUE(WaitUntil([&] { return Starts(b->Output()).size() == 4; },
                        kFormDeadline, absl::Milliseconds(20)))
      << AllOutput(all);
  ASSERT_TRUE(WaitForRecovered({a.get(), c.get()}, 6, 4, kFormDeadline))
      << AllOutput(all);
  for (Subprocess* p : all) {
    EXPECT_EQ(p->WaitOrKill(kJobDeadline), 0) << AllOutput(all);
  }
  EXPECT_EQ(Starts(a->Output()), a_starts);
  EXPECT_EQ(Starts(c->Output()), c_starts);
  EXPECT_THAT(AllOutput(all), HasSubstr("all 6 ranks agree on the parameters"));
}

}  // namespace
}  // namespace muster
