// Issue 28 end to end: `muster stacks` on a running two-agent job (C++ and
// Python workers), the watchdog's hang report in the failure summary,
// musterd's progress watch (no rank progresses: every node reports), and
// --health-check keeping a node out of a three-node elastic job, at its first
// join or at a rejoin (and a check that hangs, killed at its timeout). Real
// musterd, agents and workers on loopback.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/musterd.h"
#include "tests/testing/subprocess.h"

namespace muster {
namespace {

using ::muster::testing::BinPath;
using ::muster::testing::MakeTempDir;
using ::muster::testing::MusterdProcess;
using ::muster::testing::SourceDir;
using ::muster::testing::Subprocess;
using ::muster::testing::WaitUntil;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::Duration kStartDeadline = absl::Seconds(45);
constexpr absl::Duration kExitDeadline = absl::Seconds(45);

std::unique_ptr<Subprocess> StartAgent(const MusterdProcess& server,
                                       const std::string& job,
                                       const std::string& nnodes, int nproc,
                                       std::vector<std::string> extra) {
  std::vector<std::string> argv = {BinPath("muster"),
                                   "--nnodes=" + nnodes,
                                   absl::StrCat("--nproc-per-node=", nproc),
                                   "--rdzv-backend=c10d",
                                   "--rdzv-endpoint=" + server.endpoint(),
                                   "--rdzv-id=" + job,
                                   "--rdzv-conf=" + testing::FastRdzvConf()};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<Subprocess>(argv);
}

// Runs `muster stacks --json` and returns its JSON (null on failure).
nlohmann::json StacksJson(const MusterdProcess& server, const std::string& job,
                          std::string* output) {
  Subprocess stacks({BinPath("muster"), "stacks",
                     "--rdzv-endpoint=" + server.endpoint(), job, "--json"});
  const int rc = stacks.WaitOrKill(absl::Seconds(30));
  *output = stacks.Output();
  if (rc != 0) return nullptr;
  return nlohmann::json::parse(*output, nullptr, /*allow_exceptions=*/false);
}

// The group whose ranks are `ranks`, or null.
const nlohmann::json* GroupOf(const nlohmann::json& j,
                              const std::vector<int>& ranks) {
  if (!j.is_object() || !j.contains("groups")) return nullptr;
  for (const nlohmann::json& g : j["groups"]) {
    if (g["ranks"].get<std::vector<int>>() == ranks) return &g;
  }
  return nullptr;
}

// Two agents of two workers each run `program`; `muster stacks --json` puts
// rank 3 alone in a group naming stuck_in_data_loader and ranks 0-2 together
// in one naming wait_in_allreduce; the job runs on.
void ExpectStacksOfTwoAgents(const std::string& job,
                             const std::vector<std::string>& program) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready());
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 2; ++i)
    agents.push_back(StartAgent(server, job, "2", 2, program));
  ASSERT_TRUE(WaitUntil(
      [&] {
        int started = 0;
        for (const auto& a : agents) {
          for (int r = 0; r < 4; ++r) {
            if (a->Output().find(absl::StrCat("rank ", r, " started")) !=
                std::string::npos)
              ++started;
          }
        }
        return started == 4;
      },
      kStartDeadline))
      << agents[0]->Output() << agents[1]->Output();
  // A Python worker says it started before the bootstrap's registration is
  // certain to be seen; a second capture settles any doubt.
  std::string output;
  nlohmann::json j;
  ASSERT_TRUE(WaitUntil(
      [&] {
        j = StacksJson(server, job, &output);
        const nlohmann::json* odd = GroupOf(j, {3});
        const nlohmann::json* rest = GroupOf(j, {0, 1, 2});
        return odd != nullptr && rest != nullptr &&
               (*odd)["frames"].dump().find("stuck_in_data_loader") !=
                   std::string::npos &&
               (*rest)["frames"].dump().find("wait_in_allreduce") !=
                   std::string::npos;
      },
      absl::Seconds(30)))
      << output;
  EXPECT_EQ(j["job"], job);
  EXPECT_EQ(j["groups"][0]["ranks"].get<std::vector<int>>(),
            (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE((*GroupOf(j, {3}))["odd_one_out"].get<bool>()) << output;
  EXPECT_FALSE((*GroupOf(j, {0, 1, 2}))["odd_one_out"].get<bool>());
  EXPECT_TRUE(j["missing"].empty()) << output;
  // The job runs on: the capture stopped no worker for long.
  for (const auto& a : agents) EXPECT_TRUE(a->Running()) << a->Output();
  // The text form names both, the odd one out marked.
  Subprocess text({BinPath("muster"), "stacks",
                   "--rdzv-endpoint=" + server.endpoint(), job});
  EXPECT_EQ(text.WaitOrKill(absl::Seconds(30)), 0) << text.Output();
  EXPECT_THAT(text.Output(), HasSubstr("odd ones out: rank 3"));
  for (const auto& a : agents) {
    a->Signal(SIGTERM);
    EXPECT_NE(a->WaitOrKill(kExitDeadline), -1) << a->Output();
  }
}

TEST(StacksE2eTest, NativeWorkersGroupedAndTheOddRankNamed) {
  ExpectStacksOfTwoAgents("stacks-native",
                          {"--no-python", BinPath("stuck_ranks")});
}

TEST(StacksE2eTest, PythonWorkersGroupedByTheirPythonFunctions) {
  if (access("/usr/bin/python3", X_OK) != 0)
    GTEST_SKIP() << "no /usr/bin/python3";
  ExpectStacksOfTwoAgents("stacks-python",
                          {"--python=/usr/bin/python3",
                           SourceDir() + "/tests/workers/stuck_ranks.py"});
}

TEST(StacksE2eTest, UnknownJobIsNamed) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready());
  Subprocess stacks({BinPath("muster"), "stacks",
                     "--rdzv-endpoint=" + server.endpoint(), "no-such-job"});
  EXPECT_EQ(stacks.WaitOrKill(absl::Seconds(30)), 1);
  EXPECT_THAT(stacks.Output(), HasSubstr("knows no job 'no-such-job'"));
}

// --worker-timeout: the failure summary shows the grouped stacks, both
// functions and the odd rank out; the report and its JSON are in the log dir.
TEST(StacksE2eTest, WatchdogSummaryShowsTheStacks) {
  const std::string logs = MakeTempDir("hang-report");
  Subprocess agent({BinPath("muster"), "--standalone", "--nproc-per-node=4",
                    "--worker-timeout=3", "--log-dir=" + logs, "--no-python",
                    BinPath("stuck_ranks")});
  const int rc = agent.WaitOrKill(absl::Seconds(60));
  const std::string out = agent.Output();
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, HasSubstr("hang report"));
  EXPECT_THAT(out, HasSubstr("stuck_in_data_loader"));
  EXPECT_THAT(out, HasSubstr("wait_in_allreduce"));
  EXPECT_THAT(out, HasSubstr("odd ones out: rank 3"));
  std::vector<std::string> reports;
  for (const auto& e : std::filesystem::recursive_directory_iterator(logs)) {
    if (e.path().filename().string().rfind("hang_report_attempt_", 0) == 0)
      reports.push_back(e.path().extension().string());
  }
  EXPECT_THAT(reports, Contains(".json"));
  EXPECT_THAT(reports, Contains(".txt"));
}

// The hang report (text and JSON) written into `logs`, or empty.
std::string ReadHangReport(const std::string& logs, const std::string& ext) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(logs)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("hang_report_attempt_", 0) == 0 &&
        e.path().extension() == ext) {
      std::ifstream in(e.path());
      return std::string(std::istreambuf_iterator<char>(in), {});
    }
  }
  return "";
}

// musterd's progress watch: on two nodes every rank stops progressing at once
// (none ever reports). The agents' own watchdogs wait a grace longer when
// musterd watches, so musterd's word comes first: both nodes write the hang
// report with musterd's reason, each naming its workers' function, and
// musterd logs its decision.
TEST(StacksE2eTest, MusterdSeesNoProgressAndEveryNodeReports) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready());
  const std::string logs_a = MakeTempDir("hang-musterd-a");
  const std::string logs_b = MakeTempDir("hang-musterd-b");
  auto a = StartAgent(server, "nowhere", "2", 2,
                      {"--worker-timeout=3", "--log-dir=" + logs_a,
                       "--no-python", BinPath("stuck_ranks")});
  auto b = StartAgent(server, "nowhere", "2", 2,
                      {"--worker-timeout=3", "--log-dir=" + logs_b,
                       "--no-python", BinPath("stuck_ranks")});
  EXPECT_EQ(a->WaitOrKill(kExitDeadline), 1) << a->Output();
  EXPECT_EQ(b->WaitOrKill(kExitDeadline), 1) << b->Output();
  EXPECT_THAT(server.proc().Output(),
              HasSubstr("job nowhere: round 1: no progress from any rank for "
                        "3s (--worker-timeout"));
  const std::string why =
      "musterd saw no progress from any rank of job nowhere for 3s";
  for (auto* agent : {a.get(), b.get()}) {
    EXPECT_THAT(agent->Output(), HasSubstr("hang report: " + why));
    EXPECT_THAT(agent->Output(), Not(HasSubstr("killed by the watchdog")));
  }
  // One node runs ranks 0-1 (waiting in allreduce), the other ranks 2-3
  // (rank 3 stuck in the data loader).
  const std::string text_a = ReadHangReport(logs_a, ".txt");
  const std::string text_b = ReadHangReport(logs_b, ".txt");
  for (const std::string* text : {&text_a, &text_b}) {
    EXPECT_THAT(*text, HasSubstr(why)) << *text;
    EXPECT_THAT(*text, HasSubstr("wait_in_allreduce"));
  }
  EXPECT_THAT(text_a + text_b, HasSubstr("stuck_in_data_loader"));
  for (const std::string& logs : {logs_a, logs_b}) {
    const nlohmann::json j = nlohmann::json::parse(
        ReadHangReport(logs, ".json"), nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << logs;
    EXPECT_EQ(j.value("trigger", ""), "musterd");
  }
}

// A node whose check starts failing between rounds stays out of the next
// one: round 1 runs on three nodes until rank 0 fails (it marks the third
// node sick first); at the rejoin the third node's check fails, that agent
// exits 4 with the check's output, the other two form round 2, and musterd
// excludes the node from the job for its cooldown.
TEST(StacksE2eTest, HealthCheckFailingAtRejoinKeepsTheNodeOut) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready());
  const std::string dir = MakeTempDir("health-rejoin");
  const std::string sick = dir + "/sick";
  // Round 1 with all three nodes (a round of two, formed before the third
  // node came, is restarted for it without costing a restart): rank 0 marks
  // the third node sick and fails. Round 2 (restart count 1): success.
  const std::string script = absl::StrCat(
      "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then "
      "if [ \"$WORLD_SIZE\" = 3 ] && [ \"$RANK\" = 0 ]; then touch ",
      sick, "; exit 1; fi; sleep 60; fi; exit 0");
  const std::vector<std::string> program = {"--max-restarts=1", "--no-python",
                                            "/bin/sh", "-c", script};
  auto a = StartAgent(server, "rejoin", "2:3", 1, program);
  auto b = StartAgent(server, "rejoin", "2:3", 1, program);
  std::vector<std::string> checked = {
      absl::StrCat("--health-check=if [ -e ", sick,
                   " ]; then echo 'GPU 0 fell off the bus'; exit 5; fi")};
  checked.insert(checked.end(), program.begin(), program.end());
  auto c = StartAgent(server, "rejoin", "2:3", 1, checked);
  EXPECT_EQ(c->WaitOrKill(kExitDeadline), 4) << c->Output();
  EXPECT_THAT(c->Output(), HasSubstr("health check failed"));
  EXPECT_THAT(c->Output(), HasSubstr("exited with code 5"));
  EXPECT_THAT(c->Output(),
              HasSubstr("its output:\n    GPU 0 fell off the bus\n"));
  EXPECT_EQ(a->WaitOrKill(kExitDeadline), 0) << a->Output();
  EXPECT_EQ(b->WaitOrKill(kExitDeadline), 0) << b->Output();
  EXPECT_THAT(a->Output(), HasSubstr(" of 2, master"));
  // musterd keeps the node out of the job for --exclude-cooldown, with the
  // check's last line as the reason.
  EXPECT_THAT(server.proc().Output(),
              HasSubstr("(--health-check): health check failed (exit code 5): "
                        "GPU 0 fell off the bus; it may rejoin after"));
}

// A three-node elastic job (2:3) whose third node's health check fails: that
// agent exits 4 with the check's output; the other two run their round.
TEST(StacksE2eTest, FailingHealthCheckKeepsTheNodeOut) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready());
  const std::vector<std::string> program = {"--no-python", "/bin/true"};
  auto a = StartAgent(server, "health", "2:3", 1, program);
  auto b = StartAgent(server, "health", "2:3", 1, program);
  std::vector<std::string> sick = {
      "--health-check=echo 'disk /scratch is read-only'; exit 3"};
  sick.insert(sick.end(), program.begin(), program.end());
  auto c = StartAgent(server, "health", "2:3", 1, sick);
  EXPECT_EQ(c->WaitOrKill(kExitDeadline), 4) << c->Output();
  EXPECT_THAT(c->Output(), HasSubstr("health check failed"));
  EXPECT_THAT(c->Output(), HasSubstr("exited with code 3"));
  // The check's own output, indented under the verdict.
  EXPECT_THAT(c->Output(),
              HasSubstr("its output:\n    disk /scratch is read-only\n"));
  EXPECT_EQ(a->WaitOrKill(kExitDeadline), 0) << a->Output();
  EXPECT_EQ(b->WaitOrKill(kExitDeadline), 0) << b->Output();
  EXPECT_THAT(a->Output(), HasSubstr(" of 2, master"));
}

// A node whose workers fail round after round is excluded at
// --exclude-after-failures=2: its agent exits 5 naming why, and the other two
// finish the job without it (each failure cost a restart).
TEST(StacksE2eTest, ANodeFailingRoundsInARowIsExcluded) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready());
  // A long last call: every round has all three nodes (they all rejoin at
  // once, and a round at max closes without waiting).
  auto agent = [&](const std::string& script) {
    return std::make_unique<Subprocess>(std::vector<std::string>{
        BinPath("muster"), "--nnodes=2:3", "--nproc-per-node=1",
        "--rdzv-backend=c10d", "--rdzv-endpoint=" + server.endpoint(),
        "--rdzv-id=in-a-row", "--rdzv-conf=" + testing::FastRdzvConf(30),
        "--max-restarts=5", "--exclude-after-failures=2", "--no-python",
        "/bin/sh", "-c", script});
  };
  const std::string healthy =
      "if [ \"$TORCHELASTIC_RESTART_COUNT\" -ge 2 ]; then exit 0; fi; "
      "sleep 60";
  auto a = agent(healthy);
  auto b = agent(healthy);
  auto bad = agent("echo 'CUDA error: uncorrectable ECC error' >&2; exit 1");
  EXPECT_EQ(bad->WaitOrKill(kExitDeadline), 5) << bad->Output();
  EXPECT_THAT(bad->Output(), HasSubstr("its workers failed 2 rounds in a row"));
  EXPECT_EQ(a->WaitOrKill(kExitDeadline), 0) << a->Output();
  EXPECT_EQ(b->WaitOrKill(kExitDeadline), 0) << b->Output();
  EXPECT_THAT(a->Output(), HasSubstr(" of 2, master"));
  EXPECT_THAT(server.proc().Output(),
              HasSubstr("(--exclude-after-failures=2)"));
}

// A check that hangs is killed at --health-check-timeout, its process group
// with it.
TEST(StacksE2eTest, HangingHealthCheckIsKilledAtItsTimeout) {
  const std::string dir = MakeTempDir("health-hang");
  const std::string pid_file = dir + "/pid";
  const absl::Time start = absl::Now();
  Subprocess agent(
      {BinPath("muster"), "--standalone", "--nproc-per-node=1",
       "--health-check=echo $$ > " + pid_file + "; echo checking; sleep 300",
       "--health-check-timeout=2", "--no-python", "/bin/true"});
  EXPECT_EQ(agent.WaitOrKill(absl::Seconds(40)), 4) << agent.Output();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_THAT(agent.Output(), HasSubstr("was still running after"));
  EXPECT_THAT(agent.Output(), HasSubstr("its output:\n    checking\n"));
  std::ifstream in(pid_file);
  int pid = 0;
  in >> pid;
  ASSERT_GT(pid, 0);
  EXPECT_NE(kill(pid, 0), 0) << "the check's shell " << pid << " still runs";
}

}  // namespace
}  // namespace muster
