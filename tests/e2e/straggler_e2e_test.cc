// Stragglers end to end: a real musterd and `muster --recovery=in-place`
// agents on loopback, each a node of two `train` workers (libmuster_comm). One
// worker is slowed from outside to half speed: SIGSTOP and SIGCONT on a 50%
// duty cycle, as a throttled CPU would. Its rank must be named in
// `muster status --json` within 30 s; with --straggler-action=replace and a
// spare waiting, its node's agent exits 5 within 60 s, the spare takes the
// place, and the other nodes' workers are the same processes. With the default
// action (report) the same rank is named and nothing is replaced. Every wait
// has a deadline; the duty cycle always ends with SIGCONT.
#include <signal.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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
using ::muster::testing::LinesWith;
using ::muster::testing::MusterdProcess;
using ::muster::testing::Subprocess;
using ::muster::testing::WaitUntil;
using ::testing::HasSubstr;

constexpr absl::Duration kFormDeadline = absl::Seconds(60);
// The issue's bounds, measured from the start of the slowdown.
constexpr absl::Duration kNameDeadline = absl::Seconds(30);
constexpr absl::Duration kReplaceDeadline = absl::Seconds(60);

// A node: an agent of two train workers, in place, that trains until stopped.
std::unique_ptr<Subprocess> StartNode(const MusterdProcess& server,
                                      const std::string& job,
                                      const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {
      BinPath("muster"),     "--nnodes=3:3",
      "--nproc-per-node=2",  "--max-restarts=0",
      "--rdzv-backend=c10d", "--rdzv-endpoint=" + server.endpoint(),
      "--rdzv-id=" + job,    "--rdzv-conf=" + testing::FastRdzvConf(0.5),
      "--recovery=in-place", "--prefix-output"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.insert(argv.end(), {"--no-python", BinPath("train"), "--epochs=1000000",
                           "--step-ms=10"});
  return std::make_unique<Subprocess>(argv);
}

// The workers' `start: rank R of W pid P` lines: pid -> rank.
std::map<int, int> Starts(const std::string& output) {
  static const std::regex kStart(R"(start: rank (\d+) of (\d+) pid (\d+))");
  std::map<int, int> starts;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), kStart);
       it != std::sregex_iterator(); ++it) {
    starts.emplace(std::stoi((*it)[3]), std::stoi((*it)[1]));
  }
  return starts;
}

std::string AllOutput(const std::vector<Subprocess*>& procs) {
  std::string out;
  for (size_t i = 0; i < procs.size(); ++i) {
    absl::StrAppend(&out, "\n----- agent ", i, " -----\n", procs[i]->Output());
  }
  return out;
}

// The job's object in `muster status --json JOB` (null when it failed).
nlohmann::json JobJson(const MusterdProcess& server, const std::string& job) {
  Subprocess status({BinPath("muster"), "status",
                     "--rdzv-endpoint=" + server.endpoint(), "--json", job});
  if (status.WaitOrKill(absl::Seconds(20)) != 0) return nullptr;
  nlohmann::json j = nlohmann::json::parse(status.Output(), nullptr,
                                           /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("jobs") && j["jobs"].is_array() &&
      !j["jobs"].empty()) {
    return j["jobs"][0];
  }
  return j.is_object() && j.contains("job_id") ? j : nullptr;
}

// The job's stragglers' ranks, as the JSON names them.
std::vector<int> StragglerRanks(const nlohmann::json& job) {
  std::vector<int> ranks;
  if (!job.is_object() || !job.contains("stragglers")) return ranks;
  for (const nlohmann::json& s : job["stragglers"]) {
    if (s.contains("rank") && s["rank"].is_number_integer()) {
      ranks.push_back(s["rank"].get<int>());
    }
  }
  return ranks;
}

class StragglerE2eTest : public ::testing::Test {
 protected:
  // Starts three nodes of `job` and waits for their six workers.
  void StartJob(const std::string& job, const std::vector<std::string>& extra) {
    ASSERT_TRUE(server_.ready()) << server_.proc().Output();
    for (int i = 0; i < 3; ++i)
      nodes_.push_back(StartNode(server_, job, extra));
    ASSERT_TRUE(WaitUntil(
        [&] {
          size_t n = 0;
          for (auto& node : nodes_) n += Starts(node->Output()).size();
          return n >= 6;
        },
        kFormDeadline, absl::Milliseconds(50)))
        << Everything();
  }

  std::string Everything() {
    std::vector<Subprocess*> all;
    for (auto& node : nodes_) all.push_back(node.get());
    return AllOutput(all);
  }

  void TearDown() override {
    for (auto& node : nodes_) {
      if (node->Running()) node->Signal(SIGTERM);
    }
    for (auto& node : nodes_) node->WaitOrKill(absl::Seconds(30));
  }

  MusterdProcess server_;
  std::vector<std::unique_ptr<Subprocess>> nodes_;
};

TEST_F(StragglerE2eTest, AHalfSpeedNodeIsReplacedByASpareInPlace) {
  const std::string job = "straggler-replace";
  ASSERT_NO_FATAL_FAILURE(StartJob(job, {"--straggler-action=replace"}));
  // The spare: the job is at its maximum, so it waits for a place.
  nodes_.push_back(StartNode(server_, job, {"--straggler-action=replace"}));
  ASSERT_TRUE(nodes_[3]->WaitForOutput("spare", kFormDeadline)) << Everything();

  const std::map<int, int> a_starts = Starts(nodes_[0]->Output());
  const std::map<int, int> c_starts = Starts(nodes_[2]->Output());
  const auto slow = Starts(nodes_[1]->Output()).begin();
  const pid_t slow_pid = slow->first;
  const int slow_rank = slow->second;

  const absl::Time slowed_at = absl::Now();
  {
    testing::DutyCycle cycle(slow_pid, absl::Milliseconds(50),
                             absl::Milliseconds(50));
    // Named: among the stragglers, or already among the excluded nodes with
    // its rank in the reason (the swap can come before a poll sees the name).
    const std::string named_in_reason = absl::StrCat("rank ", slow_rank, " ");
    EXPECT_TRUE(WaitUntil(
        [&] {
          const nlohmann::json j = JobJson(server_, job);
          const std::vector<int> ranks = StragglerRanks(j);
          return std::find(ranks.begin(), ranks.end(), slow_rank) !=
                     ranks.end() ||
                 (j.is_object() && j.contains("excluded") &&
                  absl::StrContains(j["excluded"].dump(), named_in_reason));
        },
        kNameDeadline, absl::Milliseconds(200)))
        << "rank " << slow_rank << " not named within 30 s\n"
        << JobJson(server_, job).dump(2) << Everything();
    std::cerr << "half speed -> named: "
              << absl::FormatDuration(absl::Now() - slowed_at) << "\n";
    // Its node leaves with exit code 5 and says why.
    const std::optional<int> rc =
        nodes_[1]->Wait(kReplaceDeadline - (absl::Now() - slowed_at));
    ASSERT_TRUE(rc.has_value())
        << "the slow node was not replaced in 60 s" << Everything();
    EXPECT_EQ(*rc, 5) << nodes_[1]->Output();
  }
  EXPECT_THAT(nodes_[1]->Output(), HasSubstr("straggler")) << Everything();
  std::cerr << "half speed -> replaced: "
            << absl::FormatDuration(absl::Now() - slowed_at) << "\n";

  // The spare starts two workers of 6; the survivors recover in place.
  EXPECT_TRUE(WaitUntil([&] { return Starts(nodes_[3]->Output()).size() == 2; },
                        kFormDeadline, absl::Milliseconds(50)))
      << Everything();
  EXPECT_TRUE(WaitUntil(
      [&] {
        return LinesWith(nodes_[0]->Output(), "recovered: ").size() >= 2 &&
               LinesWith(nodes_[2]->Output(), "recovered: ").size() >= 2;
      },
      kFormDeadline, absl::Milliseconds(50)))
      << Everything();
  // The same processes on the other nodes: no start line but their first two.
  EXPECT_EQ(Starts(nodes_[0]->Output()), a_starts) << Everything();
  EXPECT_EQ(Starts(nodes_[2]->Output()), c_starts) << Everything();
  for (const auto& [pid, rank] : a_starts) {
    EXPECT_TRUE(testing::ProcessAlive(pid)) << "rank " << rank;
  }
  // The excluded node is listed, with why.
  const nlohmann::json after = JobJson(server_, job);
  ASSERT_TRUE(after.is_object()) << Everything();
  ASSERT_TRUE(after.contains("excluded")) << after.dump(2);
  EXPECT_THAT(after["excluded"].dump(), HasSubstr("straggler"))
      << after.dump(2);
  EXPECT_TRUE(StragglerRanks(after).empty()) << after.dump(2);
}

TEST_F(StragglerE2eTest, ReportNamesTheSlowRankAndReplacesNothing) {
  const std::string job = "straggler-report";
  ASSERT_NO_FATAL_FAILURE(StartJob(job, {}));
  const auto slow = Starts(nodes_[2]->Output()).begin();
  const absl::Time slowed_at = absl::Now();
  testing::DutyCycle cycle(slow->first, absl::Milliseconds(50),
                           absl::Milliseconds(50));
  nlohmann::json named;
  EXPECT_TRUE(WaitUntil(
      [&] {
        named = JobJson(server_, job);
        const std::vector<int> ranks = StragglerRanks(named);
        return std::find(ranks.begin(), ranks.end(), slow->second) !=
               ranks.end();
      },
      kNameDeadline, absl::Milliseconds(500)))
      << "rank " << slow->second << " not named within 30 s\n"
      << named.dump(2) << Everything();
  std::cerr << "half speed -> named (report): "
            << absl::FormatDuration(absl::Now() - slowed_at) << "\n";
  ASSERT_TRUE(named.contains("stragglers")) << named.dump(2);
  const nlohmann::json& first = named["stragglers"][0];
  for (const char* field : {"rank", "node_id", "score", "since"}) {
    EXPECT_TRUE(first.contains(field)) << field << " in " << first.dump();
  }
  // The text form names it too.
  Subprocess text({BinPath("muster"), "status",
                   "--rdzv-endpoint=" + server_.endpoint(), job});
  ASSERT_EQ(text.WaitOrKill(absl::Seconds(20)), 0) << text.Output();
  EXPECT_THAT(text.Output(), HasSubstr("straggler")) << text.Output();

  // Reported, not acted on: every node keeps running, nobody recovers.
  absl::SleepFor(absl::Seconds(5));
  for (auto& node : nodes_) EXPECT_TRUE(node->Running()) << Everything();
  EXPECT_THAT(Everything(), ::testing::Not(HasSubstr("recovered: ")));
  EXPECT_THAT(Everything(), ::testing::Not(HasSubstr("excluded")));
}

}  // namespace
}  // namespace muster
