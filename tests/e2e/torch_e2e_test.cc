// muster.torch (issue 27) with real torch processes under the real launcher:
// the default process group on musterd's Store under --recovery=restart (no
// worker hosts a TCPStore), across a restart, and on a TLS musterd that
// requires a token (the workers get their round's credential). In-place
// recovery with real agents: InPlace* below.
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/files.h"
#include "tests/testing/musterd.h"
#include "tests/testing/ports.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/tls_certs.h"
#include "tests/testing/wait.h"

namespace muster {
namespace {

using ::muster::testing::BinPath;
using ::muster::testing::EnvWithoutLauncher;
using ::muster::testing::FreePort;
using ::muster::testing::LinesWith;
using ::muster::testing::LoopbackEndpoint;
using ::muster::testing::MakeTempDir;
using ::muster::testing::MusterdProcess;
using ::muster::testing::SourceDir;
using ::muster::testing::Subprocess;
using ::muster::testing::WriteFile;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kPython[] = "/usr/bin/python3";

std::string Worker() {
  return SourceDir() + "/tests/workers/torch_allreduce.py";
}

// Every line "rank R of W: allreduce S ..." of the output, as (R, W, S).
std::set<std::tuple<int, int, int>> Allreduces(const std::string& out) {
  static const std::regex kLine(R"(rank (\d+) of (\d+): allreduce (\d+))");
  std::set<std::tuple<int, int, int>> seen;
  for (const std::string& line : LinesWith(out, "allreduce")) {
    std::smatch m;
    if (std::regex_search(line, m, kLine)) {
      seen.insert({std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3])});
    }
  }
  return seen;
}

class TorchE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kPython)) GTEST_SKIP() << "no " << kPython;
    // muster.torch needs torch only (its Store client speaks gRPC itself).
    Subprocess probe({kPython, "-c", "import torch.distributed"});
    if (probe.WaitOrKill(absl::Seconds(120)) != 0) {
      GTEST_SKIP() << "python3-torch is not installed: " << probe.Output();
    }
  }

  // The environment of a launcher: ctest's, without a surrounding job's
  // variables, with PYTHON_EXEC and no PYTHONPATH (the launcher adds its
  // package itself).
  static std::map<std::string, std::string> LauncherEnv() {
    std::map<std::string, std::string> env = EnvWithoutLauncher();
    env["PYTHON_EXEC"] = kPython;
    env["PYTHONPATH"] = "";
    env["OMP_NUM_THREADS"] = "1";
    return env;
  }
};

TEST_F(TorchE2eTest, InitProcessGroupUnderRestartModeOnFourWorkers) {
  Subprocess p({BinPath("muster"), "--standalone", "--nproc-per-node=4",
                "--prefix-output", Worker()},
               LauncherEnv());
  ASSERT_EQ(p.WaitOrKill(absl::Seconds(240)), 0) << p.Output();
  const std::string out = p.Output();
  EXPECT_EQ(Allreduces(out),
            (std::set<std::tuple<int, int, int>>{
                {0, 4, 10}, {1, 4, 10}, {2, 4, 10}, {3, 4, 10}}))
      << out;
  EXPECT_EQ(LinesWith(out, "store MusterStore recovery False").size(), 4u)
      << out;
}

TEST_F(TorchE2eTest, ARestartFormsTheGroupAgainOnTheNextRound) {
  // Rank 1 exits 3 after the first attempt's allreduce: the agent restarts
  // both workers, which form the group on round 2's namespace.
  Subprocess p({BinPath("muster"), "--standalone", "--nproc-per-node=2",
                "--max-restarts=1", Worker(), "--fail-once-rank=1"},
               LauncherEnv());
  ASSERT_EQ(p.WaitOrKill(absl::Seconds(240)), 0) << p.Output();
  const std::string out = p.Output();
  EXPECT_EQ(LinesWith(out, "of 2: allreduce 3 store MusterStore").size(), 4u)
      << out;
}

TEST_F(TorchE2eTest, TlsMusterdWithATokenGivesWorkersTheirCredential) {
  const std::string dir = MakeTempDir("torch_e2e_tls");
  absl::StatusOr<testing::TestPki> pki = testing::MakeTestPki(dir);
  ASSERT_TRUE(pki.ok()) << pki.status();
  constexpr char kToken[] = "torch-e2e-job-token-2b9d7e4f6a1c3e5d";
  WriteFile(dir + "/admin.token", "torch-e2e-admin-token-8c7b6a5d4e3f\n", 0600);
  const int port = FreePort();
  MusterdProcess musterd(
      port, {"--tls-cert=" + pki->server_cert, "--tls-key=" + pki->server_key,
             "--require-token", "--admin-token-file=" + dir + "/admin.token"});
  ASSERT_TRUE(musterd.ready()) << musterd.proc().Output();
  std::map<std::string, std::string> env = LauncherEnv();
  env["MUSTER_RDZV_TOKEN"] = kToken;
  Subprocess p(
      {BinPath("muster"), "--nnodes=1", "--nproc-per-node=2",
       "--rdzv-backend=c10d", "--rdzv-endpoint=" + LoopbackEndpoint(port),
       "--rdzv-id=torchtls", "--rdzv-conf=tls_ca=" + pki->ca_cert, Worker()},
      env);
  ASSERT_EQ(p.WaitOrKill(absl::Seconds(240)), 0) << p.Output();
  const std::string out = p.Output();
  EXPECT_EQ(Allreduces(out),
            (std::set<std::tuple<int, int, int>>{{0, 2, 3}, {1, 2, 3}}))
      << out;
  EXPECT_THAT(out, Not(HasSubstr(kToken)));
}

// --- In-place recovery with real agents (--recovery=in-place), one worker
// per node, each agent its own node on loopback.

// The pid a node's worker printed in "start: rank R of W pid P" (0: none
// yet), and how many such lines the node printed.
std::pair<long, int> StartedPid(const std::string& out) {
  static const std::regex kStart(R"(start: rank \d+ of \d+ pid (\d+))");
  long pid = 0;
  int count = 0;
  for (const std::string& line : LinesWith(out, "start: rank")) {
    std::smatch m;
    if (std::regex_search(line, m, kStart)) {
      pid = std::stol(m[1]);
      ++count;
    }
  }
  return {pid, count};
}

// Whether the node's worker is in a round of `world` ranks: it started in one
// or recovered into one.
bool InWorldOf(const std::string& out, int world) {
  const std::string of = absl::StrCat(" of ", world);
  for (const std::string& line : LinesWith(out, "start: rank")) {
    if (line.find(of + " pid") != std::string::npos) return true;
  }
  for (const std::string& line : LinesWith(out, "recovered: rank")) {
    if (line.find(of + " at step") != std::string::npos) return true;
  }
  return false;
}

class TorchInPlaceE2eTest : public TorchE2eTest {
 protected:
  std::unique_ptr<Subprocess> StartNode(
      const std::string& job, const std::string& nnodes,
      std::vector<std::string> program,
      const std::vector<std::string>& flags = {}) {
    std::vector<std::string> argv = {
        BinPath("muster"),     "--nnodes=" + nnodes,
        "--nproc-per-node=1",  "--recovery=in-place",
        "--rdzv-backend=c10d", "--rdzv-endpoint=" + musterd_.endpoint(),
        "--rdzv-id=" + job,    "--rdzv-conf=" + testing::FastRdzvConf()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back("--run-path");
    argv.insert(argv.end(), program.begin(), program.end());
    return std::make_unique<Subprocess>(argv, LauncherEnv());
  }

  static std::vector<std::string> Example(int steps) {
    return {SourceDir() + "/examples/ddp_inplace.py",
            absl::StrCat("--steps=", steps), "--step-ms=50"};
  }

  // A node of job `job` running the example, kept in nodes_.
  Subprocess* AddNode(const std::string& job, const std::string& nnodes,
                      int steps) {
    nodes_.push_back(StartNode(job, nnodes, Example(steps)));
    return nodes_.back().get();
  }

  // Three nodes of the example, once each node's worker is in a round of 3
  // (the first round, or grown into it when a node joined late) and rank 0
  // reached step 50. Fails the test (a fatal failure) when that takes over 3
  // minutes.
  void StartTraining(const std::string& job, const std::string& nnodes,
                     int steps) {
    for (int i = 0; i < 3; ++i) AddNode(job, nnodes, steps);
    bool exited = false;  // a node gave up: no point in waiting on
    ASSERT_TRUE(testing::WaitUntil(
        [&] {
          std::string all;
          for (const auto& n : nodes_) {
            if (!n->Running()) return exited = true;
            if (!InWorldOf(n->Output(), 3)) return false;
            all += n->Output();
          }
          return all.find("step 50:") != std::string::npos;
        },
        absl::Seconds(180)))
        << Dump();
    ASSERT_FALSE(exited) << Dump();
  }

  // Every node's output, for a failure's message.
  std::string Dump() const {
    std::string s;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      absl::StrAppend(&s, "--- node ", i, ":\n", nodes_[i]->Output());
    }
    return s;
  }

  MusterdProcess musterd_;
  std::vector<std::unique_ptr<Subprocess>> nodes_;
};

// The issue's "done when": three nodes of one worker, kill -9 of one agent:
// both survivors recover to a world of 2 (the same processes), a fourth node
// grows it back to 3, every agent exits 0 and rank 0 says all 3 ranks agree.
TEST_F(TorchInPlaceE2eTest, ALostNodeShrinksInPlaceAndANewNodeGrowsItBack) {
  ASSERT_TRUE(musterd_.ready()) << musterd_.proc().Output();
  ASSERT_NO_FATAL_FAILURE(StartTraining("torchshrink", "2:3", 700));
  Subprocess* a = nodes_[0].get();
  Subprocess* b = nodes_[1].get();
  Subprocess* c = nodes_[2].get();
  const long pid_a = StartedPid(a->Output()).first;
  const long pid_b = StartedPid(b->Output()).first;

  c->Signal(SIGKILL);  // kill -9 of the agent; its worker dies with it
  const absl::Time lost = absl::Now();
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return InWorldOf(a->Output(), 2) && InWorldOf(b->Output(), 2); },
      absl::Seconds(60)))
      << Dump();
  const absl::Duration shrink = absl::Now() - lost;
  // The same processes: one start each, the pids of before.
  EXPECT_EQ(StartedPid(a->Output()), std::make_pair(pid_a, 1)) << Dump();
  EXPECT_EQ(StartedPid(b->Output()), std::make_pair(pid_b, 1)) << Dump();
  // Generous for a loaded 2-core machine; bench/ measures it.
  EXPECT_LT(shrink, absl::Seconds(15)) << Dump();

  Subprocess* d = AddNode("torchshrink", "2:3", 700);
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        return InWorldOf(a->Output(), 3) && InWorldOf(b->Output(), 3) &&
               InWorldOf(d->Output(), 3);
      },
      absl::Seconds(180)))
      << Dump();
  EXPECT_EQ(StartedPid(a->Output()), std::make_pair(pid_a, 1)) << Dump();
  EXPECT_EQ(StartedPid(b->Output()), std::make_pair(pid_b, 1)) << Dump();

  for (Subprocess* p : {a, b, d}) {
    EXPECT_EQ(p->WaitOrKill(absl::Seconds(240)), 0) << Dump();
  }
  const std::string all = a->Output() + b->Output() + d->Output();
  EXPECT_THAT(all, HasSubstr("all 3 ranks agree")) << Dump();
  static const std::regex kSum(R"(checksum (\w+))");
  std::set<std::string> sums;
  for (const std::string& line : LinesWith(all, "checksum")) {
    std::smatch m;
    if (std::regex_search(line, m, kSum)) sums.insert(m[1]);
  }
  EXPECT_EQ(sums.size(), 1u) << Dump();
  std::printf("survivors in a world of 2 %.2f s after the kill -9\n",
              absl::ToDoubleSeconds(shrink));
}

// Stragglers through muster.torch.watch_speed (issue 38): three nodes of the
// example with --straggler-action=replace and a spare; one worker slowed to
// half speed from outside. Its node exits 5, the spare takes the place, and
// the other two workers recover in place (the same processes).
TEST_F(TorchInPlaceE2eTest, AHalfSpeedWorkerIsReplacedByTheSpare) {
  ASSERT_TRUE(musterd_.ready()) << musterd_.proc().Output();
  const std::vector<std::string> replace = {"--straggler-action=replace"};
  for (int i = 0; i < 3; ++i) {
    nodes_.push_back(StartNode("torchslow", "3:3", Example(100000), replace));
  }
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        for (const auto& n : nodes_) {
          if (!InWorldOf(n->Output(), 3)) return false;
        }
        return true;
      },
      absl::Seconds(180)))
      << Dump();
  nodes_.push_back(StartNode("torchslow", "3:3", Example(100000), replace));
  ASSERT_TRUE(nodes_[3]->WaitForOutput("spare", absl::Seconds(60))) << Dump();
  const long pid_a = StartedPid(nodes_[0]->Output()).first;
  const long pid_c = StartedPid(nodes_[2]->Output()).first;
  const absl::Time slowed = absl::Now();
  std::optional<int> rc;
  {
    testing::DutyCycle cycle(
        static_cast<pid_t>(StartedPid(nodes_[1]->Output()).first),
        absl::Milliseconds(50), absl::Milliseconds(50));
    rc = nodes_[1]->Wait(absl::Seconds(90));
  }
  ASSERT_TRUE(rc.has_value()) << "the slow node was not replaced\n" << Dump();
  EXPECT_EQ(*rc, 5) << Dump();
  EXPECT_THAT(nodes_[1]->Output(), HasSubstr("straggler")) << Dump();
  std::printf("half speed -> replaced: %.1f s\n",
              absl::ToDoubleSeconds(absl::Now() - slowed));
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        return InWorldOf(nodes_[3]->Output(), 3) &&
               LinesWith(nodes_[0]->Output(), "recovered: rank").size() >= 1 &&
               LinesWith(nodes_[2]->Output(), "recovered: rank").size() >= 1;
      },
      absl::Seconds(120)))
      << Dump();
  EXPECT_EQ(StartedPid(nodes_[0]->Output()), std::make_pair(pid_a, 1))
      << Dump();
  EXPECT_EQ(StartedPid(nodes_[2]->Output()), std::make_pair(pid_c, 1))
      << Dump();
  for (size_t i : {0, 2, 3}) nodes_[i]->Signal(SIGTERM);
  for (size_t i : {0, 2, 3}) nodes_[i]->WaitOrKill(absl::Seconds(60));
}

// Two nodes lost back to back (the second while the round that the first
// loss ended is re-forming): the last survivor recovers alone, in place, and
// finishes the job.
TEST_F(TorchInPlaceE2eTest, ALossDuringRecoveryLeavesTheLastSurvivorTraining) {
  ASSERT_TRUE(musterd_.ready()) << musterd_.proc().Output();
  ASSERT_NO_FATAL_FAILURE(StartTraining("torchtwice", "1:3", 400));
  Subprocess* a = nodes_[0].get();
  const long pid_a = StartedPid(a->Output()).first;
  nodes_[2]->Signal(SIGKILL);
  nodes_[1]->Signal(SIGKILL);
  ASSERT_TRUE(testing::WaitUntil([&] { return InWorldOf(a->Output(), 1); },
                                 absl::Seconds(60)))
      << Dump();
  EXPECT_EQ(StartedPid(a->Output()), std::make_pair(pid_a, 1)) << Dump();
  EXPECT_EQ(a->WaitOrKill(absl::Seconds(240)), 0) << Dump();
  EXPECT_THAT(a->Output(), HasSubstr("all 1 ranks agree")) << Dump();
}

// A script that does not use muster.torch opens no control channel: under
// --recovery=in-place its node's workers are restarted as under
// --recovery=restart (new processes), and the job still succeeds.
TEST_F(TorchInPlaceE2eTest, AScriptWithoutMusterTorchIsRestarted) {
  ASSERT_TRUE(musterd_.ready()) << musterd_.proc().Output();
  const std::vector<std::string> plain = {Worker(), "--plain", "--sleep=6"};
  auto a = StartNode("torchplain", "1:2", plain);
  auto b = StartNode("torchplain", "1:2", plain);
  auto dump = [&] {
    return absl::StrCat("--- node a:\n", a->Output(), "--- node b:\n",
                        b->Output());
  };
  // Both nodes in one round of 2 (after a round of 1, if b joined late).
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        const auto seen = Allreduces(a->Output() + b->Output());
        return seen.count({0, 2, 3}) == 1 && seen.count({1, 2, 3}) == 1;
      },
      absl::Seconds(180)))
      << dump();
  const size_t before = LinesWith(a->Output(), "allreduce").size();
  b->Signal(SIGKILL);
  // Node a's worker is started again, alone: one more line, a new pid.
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        const auto lines = LinesWith(a->Output(), "allreduce");
        return lines.size() > before &&
               lines.back().find("of 1: allreduce 1") != std::string::npos;
      },
      absl::Seconds(180)))
      << dump();
  const std::vector<std::string> lines = LinesWith(a->Output(), "allreduce");
  auto pid_of = [](const std::string& line) {
    return line.substr(line.rfind(' ') + 1);
  };
  EXPECT_NE(pid_of(lines[before - 1]), pid_of(lines.back())) << dump();
  EXPECT_EQ(a->WaitOrKill(absl::Seconds(120)), 0) << dump();
}

}  // namespace
}  // namespace muster
