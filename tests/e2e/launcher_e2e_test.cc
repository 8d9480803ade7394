// The launcher end to end: real `muster` and `musterd` processes on loopback
// running the real test worker. Every wait has a deadline; every process is
// killed with its group if a test fails.
#include <signal.h>

#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/musterd.h"
#include "tests/testing/subprocess.h"

namespace muster {
namespace {

using ::muster::testing::AllExited;
using ::muster::testing::BinPath;
using ::muster::testing::FreePort;
using ::muster::testing::MakeTempDir;
using ::muster::testing::MusterdProcess;
using ::muster::testing::PidsInDir;
using ::muster::testing::Subprocess;
using ::muster::testing::WaitUntil;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;
using ::testing::Pair;

constexpr absl::Duration kJobDeadline = absl::Seconds(60);

// Parses the "[rankN]:env NAME=VALUE" lines of test_worker --print-env, by
// global rank.
std::map<int, std::map<std::string, std::string>> EnvByRank(
    const std::string& output) {
  static const std::regex kLine(R"(^\[rank(\d+)\]:env ([A-Z_]+)=(.*)$)");
  std::map<int, std::map<std::string, std::string>> out;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    std::smatch m;
    std::string s(line);
    if (std::regex_match(s, m, kLine)) out[std::stoi(m[1])][m[2]] = m[3];
  }
  return out;
}

// With --prefix-output: these tests tell the ranks' lines apart by muster's
// "[rank<N>]:" (torchrun's default output is
// tests/e2e/torchrun_suite_e2e_test).
std::vector<std::string> Muster(std::vector<std::string> flags) {
  std::vector<std::string> argv = {BinPath("muster"), "--prefix-output"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return argv;
}

TEST(LauncherE2eTest, StandaloneFourWorkersGetTheTorchrunEnvironment) {
  Subprocess p(Muster({"--standalone", "--nproc-per-node=4", "--no-python",
                       BinPath("test_worker"), "--print-env"}));
  ASSERT_EQ(p.WaitOrKill(kJobDeadline), 0) << p.Output();
  auto env = EnvByRank(p.Output());
  ASSERT_EQ(env.size(), 4u) << p.Output();
  std::set<std::string> master_ports;
  for (int rank = 0; rank < 4; ++rank) {
    auto& e = env[rank];
    const std::string rank_text = absl::StrCat(rank);
    const char* r = rank_text.c_str();
    EXPECT_THAT(
        e, IsSupersetOf({Pair("RANK", r), Pair("LOCAL_RANK", r),
                         Pair("WORLD_SIZE", "4"), Pair("LOCAL_WORLD_SIZE", "4"),
                         Pair("GROUP_RANK", "0"), Pair("GROUP_WORLD_SIZE", "1"),
                         Pair("ROLE_RANK", r), Pair("ROLE_NAME", "default"),
                         Pair("ROLE_WORLD_SIZE", "4"),
                         Pair("MASTER_ADDR", "127.0.0.1"),
                         Pair("TORCHELASTIC_RESTART_COUNT", "0"),
                         Pair("TORCHELASTIC_MAX_RESTARTS", "0"),
                         Pair("TORCHELASTIC_USE_AGENT_STORE", "False"),
                         Pair("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
                         Pair("OMP_NUM_THREADS", "1")}));
    EXPECT_THAT(e["TORCHELASTIC_ERROR_FILE"],
                HasSubstr(absl::StrCat("/", rank, "/error.json")));
    EXPECT_EQ(e["MUSTER_ROUND"], "1");
    EXPECT_NE(e["TORCHELASTIC_RUN_ID"], "<unset>");
    EXPECT_EQ(e["TORCHELASTIC_RUN_ID"], e["MUSTER_RUN_ID"]);
    EXPECT_THAT(e["MUSTER_STORE_ENDPOINT"], HasSubstr("127.0.0.1:"));
    EXPECT_NE(e["MUSTER_STORE_PREFIX"], "<unset>");
    int port = 0;
    EXPECT_TRUE(absl::SimpleAtoi(e["MASTER_PORT"], &port) && port > 0)
        << e["MASTER_PORT"];
    master_ports.insert(e["MASTER_PORT"]);
  }
  EXPECT_EQ(master_ports.size(), 1u)
      << "every rank must see the same MASTER_PORT";
  EXPECT_THAT(p.Output(), HasSubstr("[rank3]:test_worker rank 3 done"));
}

TEST(LauncherE2eTest, StaticTwoNodesTimesTwoWorkers) {
  const std::string master_port = absl::StrCat(FreePort());
  const std::string rdzv = absl::StrCat("127.0.0.1:", FreePort());
  auto node = [&](int rank) {
    return Muster({"--nnodes=2", absl::StrCat("--node-rank=", rank),
                   "--nproc-per-node=2", "--master-addr=127.0.0.1",
                   "--master-port=" + master_port, "--rdzv-endpoint=" + rdzv,
                   "--no-python", BinPath("test_worker"), "--print-env"});
  };
  // Node 1 first: it must wait for node 0's embedded server rather than fail.
  // Deliberate: node 1 runs alone for a while (it prints nothing until it
  // connects, so there is no event to wait on).
  Subprocess n1(node(1));
  absl::SleepFor(absl::Milliseconds(300));
  Subprocess n0(node(0));
  ASSERT_EQ(n0.WaitOrKill(kJobDeadline), 0) << n0.Output();
  ASSERT_EQ(n1.WaitOrKill(kJobDeadline), 0) << n1.Output();
  auto e0 = EnvByRank(n0.Output());
  auto e1 = EnvByRank(n1.Output());
  ASSERT_EQ(e0.size(), 2u) << n0.Output();
  ASSERT_EQ(e1.size(), 2u) << n1.Output();
  // Node rank 0 runs ranks 0 and 1; node rank 1 runs ranks 2 and 3.
  EXPECT_EQ(e0.count(0) + e0.count(1), 2u);
  EXPECT_EQ(e1.count(2) + e1.count(3), 2u);
  for (auto* env : {&e0, &e1}) {
    for (auto& [rank, e] : *env) {
      EXPECT_EQ(e["WORLD_SIZE"], "4");
      EXPECT_EQ(e["GROUP_WORLD_SIZE"], "2");
      EXPECT_EQ(e["GROUP_RANK"], rank < 2 ? "0" : "1");
      EXPECT_EQ(e["LOCAL_RANK"], absl::StrCat(rank % 2));
      EXPECT_EQ(e["MASTER_ADDR"], "127.0.0.1");
      EXPECT_EQ(e["MASTER_PORT"], master_port);
    }
  }
}

TEST(LauncherE2eTest, TwoAgentsThroughRunningMusterdWithDifferentWorkerCounts) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready()) << server.proc().Output();
  auto agent = [&](int nproc) {
    return Muster({"--nnodes=2", absl::StrCat("--nproc-per-node=", nproc),
                   "--rdzv-endpoint=" + server.endpoint(),
                   "--rdzv-id=hetero-job", "--no-python",
                   BinPath("test_worker"), "--print-env"});
  };
  Subprocess a(agent(1));
  Subprocess b(agent(3));
  ASSERT_EQ(a.WaitOrKill(kJobDeadline), 0) << a.Output();
  ASSERT_EQ(b.WaitOrKill(kJobDeadline), 0) << b.Output();
  auto ea = EnvByRank(a.Output());
  auto eb = EnvByRank(b.Output());
  ASSERT_EQ(ea.size(), 1u);
  ASSERT_EQ(eb.size(), 3u);
  std::set<int> ranks;
  for (auto* env : {&ea, &eb}) {
    for (auto& [rank, e] : *env) {
      ranks.insert(rank);
      EXPECT_EQ(e["WORLD_SIZE"], "4");
      EXPECT_EQ(e["TORCHELASTIC_RUN_ID"], "hetero-job");
      EXPECT_EQ(e["LOCAL_WORLD_SIZE"], env == &ea ? "1" : "3");
    }
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3}));
}

TEST(LauncherE2eTest, WorkerFailingOnceIsRestartedAndTheJobSucceeds) {
  const std::string logs = MakeTempDir("restart-logs");
  Subprocess p(
      Muster({"--standalone", "--nproc-per-node=2", "--max-restarts=1",
              "--log-dir=" + logs, "--rdzv-id=fails-once", "--no-python",
              BinPath("test_worker"), "--print-env", "--fail-rank=1",
              "--fail-restart-count=0", "--exit-code=3"}));
  ASSERT_EQ(p.WaitOrKill(kJobDeadline), 0) << p.Output();
  // The second attempt ran with TORCHELASTIC_RESTART_COUNT=1 on every rank.
  auto lines =
      testing::LinesWith(p.Output(), "env TORCHELASTIC_RESTART_COUNT=1");
  EXPECT_EQ(lines.size(), 2u) << p.Output();
  // torchrun's layout: <log-dir>/<run-id>_<random>/attempt_<n>.
  std::vector<std::filesystem::path> runs;
  for (const auto& e : std::filesystem::directory_iterator(logs)) {
    runs.push_back(e.path());
  }
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(runs[0].filename().string(), "fails-once_"));
  EXPECT_TRUE(std::filesystem::exists(runs[0] / "attempt_0"));
  EXPECT_TRUE(std::filesystem::exists(runs[0] / "attempt_1"));
}

TEST(LauncherE2eTest, WorkerFailureWithoutRestartsNamesTheRootCause) {
  absl::Time start = absl::Now();
  Subprocess p(Muster({"--standalone", "--nproc-per-node=3", "--max-restarts=0",
                       "--no-python", BinPath("test_worker"), "--sleep=0.2",
                       "--fail-rank=2", "--exit-code=7",
                       "--error-message=ValueError: the batch is bad"}));
  EXPECT_EQ(p.WaitOrKill(kJobDeadline), 1) << p.Output();
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  const std::string out = p.Output();
  auto cause = testing::LinesWith(out, "root cause:");
  ASSERT_EQ(cause.size(), 1u) << out;
  EXPECT_THAT(cause[0], HasSubstr("rank 2"));
  EXPECT_THAT(cause[0], HasSubstr("code 7"));
  EXPECT_THAT(cause[0], HasSubstr("ValueError: the batch is bad"));
}

TEST(LauncherE2eTest, SigtermToTheLauncherLeavesNoProcessBehind) {
  const std::string pids = MakeTempDir("pids");
  Subprocess p(
      Muster({"--standalone", "--nproc-per-node=3", "--no-python",
              BinPath("test_worker"), "--pid-dir=" + pids, "--sleep=120"}));
  ASSERT_TRUE(
      WaitUntil([&] { return PidsInDir(pids).size() >= 3; }, absl::Seconds(30)))
      << p.Output();
  p.Signal(SIGTERM);
  std::optional<int> rc = p.Wait(absl::Seconds(20));
  ASSERT_TRUE(rc.has_value()) << "muster did not exit after SIGTERM\n"
                              << p.Output();
  EXPECT_EQ(*rc, 128 + SIGTERM) << p.Output();
  EXPECT_TRUE(AllExited(PidsInDir(pids), absl::Seconds(5)));
}

TEST(LauncherE2eTest, WorkersDieWithAKilledLauncher) {
  const std::string pids = MakeTempDir("pids-kill");
  Subprocess p(Muster({"--standalone", "--nproc-per-node=2", "--no-python",
                       BinPath("test_worker"), "--pid-dir=" + pids,
                       "--sleep=120", "--ignore-sigterm"}));
  ASSERT_TRUE(
      WaitUntil([&] { return PidsInDir(pids).size() >= 2; }, absl::Seconds(30)))
      << p.Output();
  p.Signal(SIGKILL);
  p.Wait(absl::Seconds(10));
  EXPECT_TRUE(AllExited(PidsInDir(pids), absl::Seconds(10)))
      << "workers outlived a SIGKILLed launcher";
}

}  // namespace
}  // namespace muster
