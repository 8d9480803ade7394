// Elastic rendezvous end to end (issue 3): real `musterd` and several `muster`
// agents on loopback, each its own node, running the real test worker (or a
// small shell script around it that sleeps or fails on cue). Every wait is on
// a condition with a generous deadline (the machine may be a loaded 2-core
// box); every agent is killed with its process group when a test ends, and the
// fixture checks that no worker outlived its test.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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
using ::muster::testing::FreePort;
using ::muster::testing::LinesWith;
using ::muster::testing::MakeTempDir;
using ::muster::testing::MusterdProcess;
using ::muster::testing::PidsInDir;
using ::muster::testing::Subprocess;
using ::muster::testing::WaitUntil;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;
using ::testing::Pair;

// Deadlines: far above what a healthy run needs, so that only a real hang
// fails them.
constexpr absl::Duration kFormDeadline = absl::Seconds(45);
constexpr absl::Duration kJobDeadline = absl::Seconds(60);
constexpr absl::Duration kExitDeadline = absl::Seconds(30);

// One worker's contract variables, from its `env NAME=VALUE` lines.
using WorkerEnv = std::map<std::string, std::string>;

// Every worker's environment printed in `output` (test_worker --print-env), in
// order of appearance. A block starts at the worker's `env RANK=` line; lines
// of different ranks may interleave, lines of one rank do not. Only complete
// blocks (those that reached MUSTER_ROUND, the last variable printed) count.
std::vector<WorkerEnv> EnvBlocks(const std::string& output) {
  static const std::regex kLine(R"(^\[rank(\d+)\]:env ([A-Z_]+)=(.*)$)");
  std::vector<WorkerEnv> blocks;
  std::map<int, size_t> current;  // rank -> its block being read
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    std::smatch m;
    std::string s(line);
    if (!std::regex_match(s, m, kLine)) continue;
    const int rank = std::stoi(m[1]);
    if (m[2] == "RANK") {
      current[rank] = blocks.size();
      blocks.emplace_back();
    }
    auto it = current.find(rank);
    if (it != current.end()) blocks[it->second][m[2]] = m[3];
  }
  std::vector<WorkerEnv> complete;
  for (auto& b : blocks) {
    if (b.count("MUSTER_ROUND") > 0) complete.push_back(std::move(b));
  }
  return complete;
}

// The workers of one round.
std::vector<WorkerEnv> RoundEnvs(const std::string& output, int round) {
  std::vector<WorkerEnv> out;
  for (auto& e : EnvBlocks(output)) {
    if (e["MUSTER_ROUND"] == absl::StrCat(round)) out.push_back(std::move(e));
  }
  return out;
}

// The highest round this agent has run workers in (0: none yet).
int LatestRound(const std::string& output) {
  int latest = 0;
  for (auto& e : EnvBlocks(output))
    latest = std::max(latest, std::stoi(e["MUSTER_ROUND"]));
  return latest;
}

// What each agent ran, for failure messages: "{round 2 rank 3/4 group 1}".
std::string Describe(const std::vector<Subprocess*>& agents) {
  std::string out;
  for (size_t i = 0; i < agents.size(); ++i) {
    absl::StrAppend(&out, "agent ", i, ":");
    for (const WorkerEnv& e : EnvBlocks(agents[i]->Output())) {
      absl::StrAppend(&out, " {round ", e.at("MUSTER_ROUND"), " rank ",
                      e.count("RANK") ? e.at("RANK") : "?", "/",
                      e.count("WORLD_SIZE") ? e.at("WORLD_SIZE") : "?",
                      " group ",
                      e.count("GROUP_RANK") ? e.at("GROUP_RANK") : "?", "}");
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

// Waits until all `agents` run `nproc` workers each in one same round, later
// than `after`, of `world_size` ranks, and that round is the latest of each.
// Returns the round, or 0 on timeout. (With a short last call a slow agent
// can miss a round and cause one more: waiting for the outcome, not for a
// round number, keeps the tests robust on a loaded machine.)
int WaitForCommonRound(const std::vector<Subprocess*>& agents, int after,
                       int nproc, int world_size, absl::Duration timeout) {
  int found = 0;
  WaitUntil(
      [&] {
        const int round = LatestRound(agents[0]->Output());
        if (round <= after) return false;
        for (Subprocess* p : agents) {
          const std::string out = p->Output();
          if (LatestRound(out) != round) return false;
          std::vector<WorkerEnv> envs = RoundEnvs(out, round);
          if (static_cast<int>(envs.size()) != nproc) return false;
          for (WorkerEnv& e : envs) {
            if (e["WORLD_SIZE"] != absl::StrCat(world_size)) return false;
          }
        }
        found = round;
        return true;
      },
      timeout, absl::Milliseconds(50));
  return found;
}

// Writes an executable shell script; `body` may use $TW for the test worker.
std::string WriteScript(const std::string& dir, const std::string& name,
                        const std::string& body) {
  const std::string path = dir + "/" + name;
  std::ofstream f(path);
  f << "#!/bin/sh\nTW='" << BinPath("test_worker") << "'\n" << body << "\n";
  f.close();
  chmod(path.c_str(), 0755);
  return path;
}

struct AgentSpec {
  std::string job;
  std::string nnodes;
  int nproc = 2;
  int max_restarts = 0;
  std::string rdzv_conf = testing::FastRdzvConf();
  // The program and its arguments (the test worker by default).
  std::vector<std::string> program;
};

// With --prefix-output: EnvBlocks tells the ranks' lines apart by muster's
// "[rank<N>]:".
std::unique_ptr<Subprocess> StartAgent(const MusterdProcess& server,
                                       const AgentSpec& spec) {
  std::vector<std::string> argv = {
      BinPath("muster"),
      "--nnodes=" + spec.nnodes,
      absl::StrCat("--nproc-per-node=", spec.nproc),
      absl::StrCat("--max-restarts=", spec.max_restarts),
      "--rdzv-backend=c10d",
      "--rdzv-endpoint=" + server.endpoint(),
      "--rdzv-id=" + spec.job,
      "--rdzv-conf=" + spec.rdzv_conf,
      "--prefix-output",
      "--no-python"};
  argv.insert(argv.end(), spec.program.begin(), spec.program.end());
  return std::make_unique<Subprocess>(argv);
}

// "node <id>" as the agent announced itself ("... as node <id> (...").
std::string NodeIdOf(const Subprocess& agent) {
  static const std::regex kJoined(R"(as node (\S+) \()");
  std::smatch m;
  const std::string out = agent.Output();
  if (std::regex_search(out, m, kJoined)) return m[1];
  return "";
}

// Waits for all of procs within one shared deadline; returns their exit codes
// (-1 for one that was still running and got killed).
std::vector<int> WaitAll(const std::vector<Subprocess*>& procs,
                         absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<int> codes;
  for (Subprocess* p : procs) {
    codes.push_back(
        p->WaitOrKill(std::max(absl::ZeroDuration(), deadline - absl::Now())));
  }
  return codes;
}

std::string AllOutput(const std::vector<Subprocess*>& procs) {
  std::string out;
  for (size_t i = 0; i < procs.size(); ++i) {
    absl::StrAppend(&out, "\n----- process ", i, " -----\n",
                    procs[i]->Output());
  }
  return out;
}

class ElasticE2eTest : public ::testing::Test {
 protected:
  // A fresh directory for test_worker --pid-dir; TearDown checks that every
  // worker that wrote its pid there is gone.
  std::string PidDir(const std::string& tag) {
    std::string dir = MakeTempDir("elastic-" + tag);
    pid_dirs_.push_back(dir);
    return dir;
  }

  void TearDown() override {
    // The agents (locals of the test) are gone by now; their workers die with
    // them (parent-death signal).
    for (const std::string& dir : pid_dirs_) {
      EXPECT_TRUE(AllExited(PidsInDir(dir), absl::Seconds(15)))
          << "a worker of " << dir << " outlived its agent";
    }
  }

  // SIGTERM to each still running process, then waits for all; false if one
  // did not exit.
  static bool TerminateAll(const std::vector<Subprocess*>& procs) {
    for (Subprocess* p : procs) p->Signal(SIGTERM);
    bool all = true;
    for (Subprocess* p : procs) all = p->Wait(kExitDeadline).has_value() && all;
    return all;
  }

  std::vector<std::string> pid_dirs_;
};

// 1. Three agents with --nnodes=2:3 form one round of 6 ranks: the round closes
// at max at once (the last call is long here so that only reaching max can
// close it).
TEST_F(ElasticE2eTest, ThreeAgentsFormOneRoundOfSixRanks) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready()) << server.proc().Output();
  AgentSpec spec{.job = "three",
                 .nnodes = "2:3",
                 .nproc = 2,
                 .rdzv_conf = "last_call_timeout=20",
                 .program = {BinPath("test_worker"), "--print-env"}};
  auto a = StartAgent(server, spec);
  auto b = StartAgent(server, spec);
  auto c = StartAgent(server, spec);
  const absl::Time start = absl::Now();
  std::vector<Subprocess*> all = {a.get(), b.get(), c.get()};
  ASSERT_THAT(WaitAll(all, kJobDeadline), ElementsAre(0, 0, 0))
      << AllOutput(all);
  // Well below the 20 s last call: max closed the round.
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));

  std::set<int> ranks;
  std::set<std::string> group_ranks, masters, prefixes;
  for (Subprocess* p : {a.get(), b.get(), c.get()}) {
    std::vector<WorkerEnv> envs = EnvBlocks(p->Output());
    ASSERT_EQ(envs.size(), 2u) << p->Output();
    EXPECT_EQ(envs[0]["GROUP_RANK"], envs[1]["GROUP_RANK"]);
    for (WorkerEnv& e : envs) {
      ranks.insert(std::stoi(e["RANK"]));
      group_ranks.insert(e["GROUP_RANK"]);
      masters.insert(e["MASTER_ADDR"] + ":" + e["MASTER_PORT"]);
      prefixes.insert(e["MUSTER_STORE_PREFIX"]);
      EXPECT_THAT(e,
                  IsSupersetOf(
                      {Pair("WORLD_SIZE", "6"), Pair("GROUP_WORLD_SIZE", "3"),
                       Pair("LOCAL_WORLD_SIZE", "2"), Pair("MUSTER_ROUND", "1"),
                       Pair("TORCHELASTIC_RESTART_COUNT", "0"),
                       Pair("TORCHELASTIC_RUN_ID", "three")}));
      EXPECT_EQ(e["RANK"], absl::StrCat(std::stoi(e["GROUP_RANK"]) * 2 +
                                        std::stoi(e["LOCAL_RANK"])));
    }
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(group_ranks, (std::set<std::string>{"0", "1", "2"}));
  EXPECT_EQ(masters.size(), 1u) << "one MASTER_ADDR:MASTER_PORT for all";
  EXPECT_EQ(prefixes, (std::set<std::string>{"three/1"}));
}

// 2. kill -9 of one agent: its workers die with it, and the two survivors run
// a new round of 4 ranks with the new WORLD_SIZE, then finish the job.
TEST_F(ElasticE2eTest, KilledAgentLeavesTwoSurvivorsInANewRoundOfFour) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready()) << server.proc().Output();
  const std::string dir = MakeTempDir("elastic-kill");
  // Workers sleep until interrupted; once the test has killed an agent, the
  // next round's workers finish after a second.
  const std::string killed_marker = dir + "/killed";
  const std::string script =
      WriteScript(dir, "after_kill.sh",
                  "if [ -e '" + killed_marker +
                      "' ]; then s=1; else s=120; fi\n"
                      "exec \"$TW\" --print-env --sleep=$s \"$@\"");
  std::vector<std::string> pids;
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (const char* tag : {"kill-a", "kill-b", "kill-c"}) {
    pids.push_back(PidDir(tag));
    agents.push_back(StartAgent(
        server, AgentSpec{.job = "kill9",
                          .nnodes = "2:3",
                          .nproc = 2,
                          .program = {script, "--pid-dir=" + pids.back()}}));
  }
  std::vector<Subprocess*> all = {agents[0].get(), agents[1].get(),
                                  agents[2].get()};
  std::vector<Subprocess*> survivors = {all[0], all[1]};
  const int round = WaitForCommonRound(all, 0, 2, 6, kFormDeadline);
  ASSERT_GT(round, 0) << Describe(all) << AllOutput(all);
  ASSERT_TRUE(
      WaitUntil([&] { return PidsInDir(pids[2]).size() == 2; }, kFormDeadline));
  const std::vector<pid_t> victim_workers = PidsInDir(pids[2]);

  std::ofstream(killed_marker) << "now\n";
  const absl::Time killed_at = absl::Now();
  all[2]->Signal(SIGKILL);
  all[2]->Wait(absl::Seconds(10));
  EXPECT_TRUE(AllExited(victim_workers, absl::Seconds(10)))
      << "the killed agent's workers are still running";

  // The survivors: the next round has 2 nodes, 4 ranks.
  const int next = WaitForCommonRound(survivors, round, 2, 4, kFormDeadline);
  ASSERT_GT(next, 0) << Describe(all) << AllOutput(all);
  const absl::Duration recovery = absl::Now() - killed_at;
  EXPECT_EQ(next, round + 1) << Describe(all);
  EXPECT_LT(recovery, absl::Seconds(20));
  std::set<int> ranks;
  for (Subprocess* p : survivors) {
    for (WorkerEnv& e : RoundEnvs(p->Output(), next)) {
      ranks.insert(std::stoi(e["RANK"]));
      EXPECT_EQ(e["WORLD_SIZE"], "4");
      EXPECT_EQ(e["GROUP_WORLD_SIZE"], "2");
      EXPECT_EQ(e["MUSTER_STORE_PREFIX"], absl::StrCat("kill9/", next));
      // A lost node costs no restart.
      EXPECT_EQ(e["TORCHELASTIC_RESTART_COUNT"], "0");
    }
    EXPECT_THAT(p->Output(), HasSubstr("lost (stream closed)")) << p->Output();
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3}));
  // The shrunken job completes.
  EXPECT_THAT(WaitAll(survivors, kJobDeadline), ElementsAre(0, 0))
      << AllOutput(all);
  std::cerr << "recovery after kill -9: " << absl::FormatDuration(recovery)
            << " (includes the 1 s last call)\n";
}

// 3. Scale up: a fourth agent arriving while three run (max 4) makes everyone
// re-form with 4 nodes, the newcomer after the survivors; at max a fifth waits
// as a spare without disturbing the round, and fills the place of a lost node.
TEST_F(ElasticE2eTest, NewcomerScalesUpAndASpareWaitsAtMax) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready()) << server.proc().Output();
  auto spec = [&](const std::string& tag) {
    return AgentSpec{.job = "scale",
                     .nnodes = "2:4",
                     .nproc = 2,
                     .program = {BinPath("test_worker"), "--print-env",
                                 "--sleep=120", "--pid-dir=" + PidDir(tag)}};
  };
  auto a = StartAgent(server, spec("a"));
  auto b = StartAgent(server, spec("b"));
  auto c = StartAgent(server, spec("c"));
  std::vector<Subprocess*> three = {a.get(), b.get(), c.get()};
  const int round = WaitForCommonRound(three, 0, 2, 6, kFormDeadline);
  ASSERT_GT(round, 0) << Describe(three) << AllOutput(three);

  // The fourth: everyone moves to a round of 4 nodes, 8 ranks.
  auto d = StartAgent(server, spec("d"));
  std::vector<Subprocess*> four = {a.get(), b.get(), c.get(), d.get()};
  const int scaled = WaitForCommonRound(four, round, 2, 8, kFormDeadline);
  ASSERT_GT(scaled, 0) << Describe(four) << AllOutput(four);
  std::map<size_t, std::string> group_of;  // per agent, in round `scaled`
  std::set<int> ranks;
  for (size_t i = 0; i < four.size(); ++i) {
    for (WorkerEnv& e : RoundEnvs(four[i]->Output(), scaled)) {
      EXPECT_EQ(e["GROUP_WORLD_SIZE"], "4");
      EXPECT_EQ(e["TORCHELASTIC_RESTART_COUNT"], "0");  // scale-up is free
      ranks.insert(std::stoi(e["RANK"]));
      group_of[i] = e["GROUP_RANK"];
    }
  }
  EXPECT_EQ(ranks.size(), 8u);
  if (scaled == round + 1) {
    // Survivors keep their group order; the newcomer comes after them. (A
    // survivor slower to rejoin than the last call would have missed a round
    // and become a newcomer itself: only the direct scale-up is checked.)
    EXPECT_EQ(group_of[3], "3") << Describe(four);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(RoundEnvs(four[i]->Output(), round)[0]["GROUP_RANK"],
                group_of[i])
          << "agent " << i << " moved in the group order\n"
          << Describe(four);
    }
  } else {
    std::cerr << "scale-up took " << scaled - round << " rounds\n"
              << Describe(four);
  }

  // A fifth at max: a spare. The running round goes on undisturbed.
  auto e = StartAgent(server, spec("e"));
  ASSERT_TRUE(e->WaitForOutput("as a spare", kFormDeadline)) << e->Output();
  absl::SleepFor(absl::Seconds(3));  // more than the last call: no new round
  for (Subprocess* p : four) {
    EXPECT_EQ(LatestRound(p->Output()), scaled) << p->Output();
  }
  EXPECT_TRUE(EnvBlocks(e->Output()).empty()) << e->Output();
  EXPECT_TRUE(e->Running()) << e->Output();

  // A member dies: the spare takes the free place, after the survivors.
  b->Signal(SIGKILL);
  b->Wait(absl::Seconds(10));
  std::vector<Subprocess*> next = {a.get(), c.get(), d.get(), e.get()};
  const int refilled = WaitForCommonRound(next, scaled, 2, 8, kFormDeadline);
  ASSERT_GT(refilled, 0) << Describe(next) << AllOutput(next);
  if (refilled == scaled + 1) {
    for (WorkerEnv& env : RoundEnvs(e->Output(), refilled)) {
      EXPECT_EQ(env["GROUP_RANK"], "3") << Describe(next);
    }
  }
  EXPECT_TRUE(TerminateAll(next)) << AllOutput(next);
}

// 3b. A newcomer while the round is finishing (a node's workers have all
// succeeded) does not scale up: that would rerun finished work everywhere. It
// waits as a spare and shares the job's success.
TEST_F(ElasticE2eTest, NewcomerDoesNotRestartAFinishingRound) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready()) << server.proc().Output();
  auto spec = [&](const std::string& sleep) {
    return AgentSpec{
        .job = "finishing",
        .nnodes = "2:3",
        .nproc = 2,
        .program = {BinPath("test_worker"), "--print-env", "--sleep=" + sleep}};
  };
  auto fast = StartAgent(server, spec("0.2"));
  auto slow = StartAgent(server, spec("5"));
  ASSERT_TRUE(
      fast->WaitForOutput("workers of this node succeeded", kFormDeadline))
      << AllOutput({fast.get(), slow.get()});
  ASSERT_TRUE(slow->Running()) << slow->Output();
  auto late = StartAgent(server, spec("0.2"));
  std::vector<Subprocess*> all = {fast.get(), slow.get(), late.get()};
  EXPECT_THAT(WaitAll(all, kJobDeadline), ElementsAre(0, 0, 0))
      << AllOutput(all);
  EXPECT_EQ(EnvBlocks(fast->Output()).size(), 2u)
      << "finished workers ran again\n"
      << AllOutput(all);
  EXPECT_EQ(EnvBlocks(slow->Output()).size(), 2u) << AllOutput(all);
  EXPECT_TRUE(EnvBlocks(late->Output()).empty()) << late->Output();
  EXPECT_THAT(late->Output(), HasSubstr("as a spare"));
}

// 4. A worker fails with --max-restarts=1 in a 2-node job: every node restarts
// (every rank of the second round sees TORCHELASTIC_RESTART_COUNT=1) and the
// job succeeds on both agents.
TEST_F(ElasticE2eTest, WorkerFailureRestartsEveryNodeAndTheJobSucceeds) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready()) << server.proc().Output();
  const std::string dir = MakeTempDir("elastic-restart");
  // First attempt: rank 3 fails after half a second while the others are
  // still busy; the second attempt succeeds everywhere.
  const std::string script = WriteScript(
      dir, "fail_once.sh",
      "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then\n"
      "  if [ \"$RANK\" = 3 ]; then exec \"$TW\" --print-env --sleep=0.5 "
      "--exit-code=3 --error-message='RuntimeError: once'; fi\n"
      "  exec \"$TW\" --print-env --sleep=60\n"
      "fi\n"
      "exec \"$TW\" --print-env --sleep=0.5");
  AgentSpec spec{.job = "restart1",
                 .nnodes = "2",
                 .nproc = 2,
                 .max_restarts = 1,
                 .program = {script}};
  auto a = StartAgent(server, spec);
  auto b = StartAgent(server, spec);
  ASSERT_THAT(WaitAll({a.get(), b.get()}, kJobDeadline), ElementsAre(0, 0))
      << AllOutput({a.get(), b.get()});
  std::set<int> ranks;
  for (Subprocess* p : {a.get(), b.get()}) {
    const std::string out = p->Output();
    EXPECT_EQ(LinesWith(out, "env TORCHELASTIC_RESTART_COUNT=1").size(), 2u)
        << out;
    EXPECT_EQ(LinesWith(out, "env TORCHELASTIC_RESTART_COUNT=0").size(), 2u)
        << out;
    for (WorkerEnv& e : EnvBlocks(out)) {
      if (e["TORCHELASTIC_RESTART_COUNT"] != "1") continue;
      ranks.insert(std::stoi(e["RANK"]));
      EXPECT_EQ(e["MUSTER_ROUND"], "2");
      EXPECT_EQ(e["WORLD_SIZE"], "4");
      EXPECT_EQ(e["TORCHELASTIC_MAX_RESTARTS"], "1");
    }
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3}));
}

// 5. With --max-restarts=0 a worker failure ends the job: every agent exits
// non-zero within seconds and prints the same root cause.
TEST_F(ElasticE2eTest,
       WorkerFailureWithoutRestartsFailsEveryAgentWithOneCause) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready()) << server.proc().Output();
  const std::string dir = MakeTempDir("elastic-fail");
  const std::string pa = PidDir("fail-a"), pb = PidDir("fail-b");
  const std::string script =
      WriteScript(dir, "fail.sh",
                  "if [ \"$RANK\" = 3 ]; then exec \"$TW\" --print-env \"$@\" "
                  "--sleep=1 --exit-code=7 "
                  "'--error-message=ValueError: the batch is bad'; fi\n"
                  "exec \"$TW\" --print-env \"$@\" --sleep=120");
  auto a =
      StartAgent(server, AgentSpec{.job = "fail0",
                                   .nnodes = "2",
                                   .nproc = 2,
                                   .program = {script, "--pid-dir=" + pa}});
  auto b =
      StartAgent(server, AgentSpec{.job = "fail0",
                                   .nnodes = "2",
                                   .nproc = 2,
                                   .program = {script, "--pid-dir=" + pb}});
  std::vector<Subprocess*> both = {a.get(), b.get()};
  ASSERT_TRUE(WaitUntil(
      [&] { return PidsInDir(pa).size() + PidsInDir(pb).size() == 4; },
      kFormDeadline))
      << AllOutput(both);
  const absl::Time started = absl::Now();
  std::vector<pid_t> workers = PidsInDir(pa);
  for (pid_t p : PidsInDir(pb)) workers.push_back(p);
  EXPECT_THAT(WaitAll(both, kExitDeadline), ElementsAre(1, 1))
      << AllOutput(both);
  // The failing worker sleeps 1 s; the rest is propagation.
  EXPECT_LT(absl::Now() - started, absl::Seconds(15));
  EXPECT_TRUE(AllExited(workers, absl::Seconds(5)))
      << "sleeping workers survived the failed job";

  // Which agent ran rank 3 (group rank 1).
  Subprocess* failed_node = nullptr;
  for (Subprocess* p : both) {
    for (WorkerEnv& e : EnvBlocks(p->Output())) {
      if (e["RANK"] == "3") failed_node = p;
    }
  }
  ASSERT_NE(failed_node, nullptr) << AllOutput(both);
  const std::string node_id = NodeIdOf(*failed_node);
  ASSERT_FALSE(node_id.empty()) << failed_node->Output();
  std::vector<std::string> causes;
  for (Subprocess* p : both) {
    auto lines = LinesWith(p->Output(), "root cause:");
    ASSERT_EQ(lines.size(), 1u) << p->Output();
    causes.push_back(lines[0]);
    EXPECT_THAT(lines[0], HasSubstr("rank 3"));
    EXPECT_THAT(lines[0], HasSubstr(node_id));
    EXPECT_THAT(lines[0], HasSubstr("code 7"));
    EXPECT_THAT(lines[0], HasSubstr("ValueError: the batch is bad"));
  }
  EXPECT_EQ(causes[0], causes[1]) << "the agents disagree on the root cause";
}

// 6. An agent that hangs with its connection open (SIGSTOP) is found by the
// heartbeats: the others restart within a few seconds. SIGCONT at the end; the
// stopped agent must then leave or rejoin, never run stale workers forever.
TEST_F(ElasticE2eTest, StoppedAgentIsLostOnMissedHeartbeats) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready()) << server.proc().Output();
  // Heartbeat timeout 0.25 s x 8 = 2 s.
  auto spec = [&](const std::string& tag) {
    return AgentSpec{.job = "sigstop",
                     .nnodes = "2:3",
                     .nproc = 2,
                     .rdzv_conf = testing::FastRdzvConf(1, 8),
                     .program = {BinPath("test_worker"), "--print-env",
                                 "--sleep=120", "--pid-dir=" + PidDir(tag)}};
  };
  auto a = StartAgent(server, spec("a"));
  auto b = StartAgent(server, spec("b"));
  auto c = StartAgent(server, spec("c"));
  std::vector<Subprocess*> all = {a.get(), b.get(), c.get()};
  const int round = WaitForCommonRound(all, 0, 2, 6, kFormDeadline);
  ASSERT_GT(round, 0) << Describe(all) << AllOutput(all);

  const absl::Time stopped_at = absl::Now();
  c->Signal(SIGSTOP);
  const int next =
      WaitForCommonRound({a.get(), b.get()}, round, 2, 4, kFormDeadline);
  const absl::Duration detection = absl::Now() - stopped_at;
  c->Signal(SIGCONT);  // whatever happened, never leave it stopped
  ASSERT_GT(next, 0) << Describe(all) << AllOutput(all)
                     << server.proc().Output();
  // 2 s of missed heartbeats + 1 s last call + starting workers.
  EXPECT_LT(detection, absl::Seconds(12));
  for (Subprocess* p : {a.get(), b.get()}) {
    EXPECT_THAT(p->Output(), HasSubstr("no heartbeat")) << p->Output();
  }
  std::cerr << "hung agent detected and survivors restarted after "
            << absl::FormatDuration(detection) << "\n";

  // Resumed, the stopped agent learns it was dropped: it exits, or it joins
  // again (a newcomer: scale-up to 3 nodes). Either must happen soon.
  const bool settled = WaitUntil(
      [&] { return !c->Running() || LatestRound(c->Output()) > round; },
      kFormDeadline);
  EXPECT_TRUE(settled) << "the resumed agent neither left nor rejoined\n"
                       << c->Output();
  std::cerr << "resumed agent: "
            << (c->Running()
                    ? "rejoined"
                    : absl::StrCat("exited ", *c->Wait(absl::ZeroDuration())))
            << "\n";
  EXPECT_TRUE(TerminateAll(all)) << AllOutput(all);
}

// 6b. The same at max: the hung agent's place is taken by a spare, so when it
// resumes it can only wait as a spare itself. Its workers of the old round
// must stop then, not run on beside the round that replaced them.
TEST_F(ElasticE2eTest, ResumedAgentThatBecomesASpareStopsItsOldWorkers) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready()) << server.proc().Output();
  std::map<Subprocess*, std::string> pid_dir;
  auto start = [&](const std::string& tag) {
    const std::string dir = PidDir(tag);
    auto p = StartAgent(
        server, AgentSpec{.job = "spare-stop",
                          .nnodes = "2",
                          .nproc = 1,
                          .rdzv_conf = testing::FastRdzvConf(1, 8),
                          .program = {BinPath("test_worker"), "--print-env",
                                      "--sleep=120", "--pid-dir=" + dir}});
    pid_dir[p.get()] = dir;
    return p;
  };
  auto a = start("spare-a");
  auto b = start("spare-b");
  std::vector<Subprocess*> pair = {a.get(), b.get()};
  ASSERT_GT(WaitForCommonRound(pair, 0, 1, 2, kFormDeadline), 0)
      << AllOutput(pair);
  auto c = start("spare-c");
  ASSERT_TRUE(c->WaitForOutput("as a spare", kFormDeadline)) << c->Output();
  const std::vector<pid_t> old_workers = PidsInDir(pid_dir[a.get()]);
  ASSERT_EQ(old_workers.size(), 1u);

  a->Signal(SIGSTOP);
  const int next =
      WaitForCommonRound({b.get(), c.get()}, 1, 1, 2, kFormDeadline);
  a->Signal(SIGCONT);
  ASSERT_GT(next, 0) << AllOutput({a.get(), b.get(), c.get()});
  // Back, a finds the round full: it waits as a spare, without its workers.
  EXPECT_TRUE(WaitUntil(
      [&] {
        return LinesWith(a->Output(), "as a spare").size() > 0 || !a->Running();
      },
      kFormDeadline))
      << a->Output();
  EXPECT_TRUE(AllExited(old_workers, absl::Seconds(15)))
      << "the resumed agent's workers of round 1 still run beside round "
      << next << "\n"
      << a->Output();
  EXPECT_TRUE(TerminateAll({a.get(), b.get(), c.get()}));
}

// 7. Fewer than MIN nodes when join_timeout passes: a clear failure naming the
// shortfall, on every agent that did join.
TEST_F(ElasticE2eTest, FewerThanMinNodesAfterJoinTimeoutFailsClearly) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready()) << server.proc().Output();
  AgentSpec spec{.job = "short",
                 .nnodes = "3:4",
                 .nproc = 1,
                 .rdzv_conf = "join_timeout=3,last_call_timeout=1",
                 .program = {BinPath("test_worker"), "--print-env"}};
  const absl::Time start = absl::Now();
  auto a = StartAgent(server, spec);
  auto b = StartAgent(server, spec);
  EXPECT_THAT(WaitAll({a.get(), b.get()}, kJobDeadline), ElementsAre(1, 1))
      << AllOutput({a.get(), b.get()});
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Seconds(3));
  EXPECT_LT(took, absl::Seconds(30));
  for (Subprocess* p : {a.get(), b.get()}) {
    auto lines = LinesWith(p->Output(), "root cause:");
    ASSERT_EQ(lines.size(), 1u) << p->Output();
    EXPECT_THAT(lines[0], HasSubstr("only 2 of the 3 nodes needed"));
    EXPECT_THAT(lines[0], HasSubstr("--nnodes=3:4"));
    EXPECT_THAT(lines[0], HasSubstr("join_timeout 3s"));
    EXPECT_TRUE(EnvBlocks(p->Output()).empty()) << "no round should have run";
  }
}

// 8. musterd dies (SIGKILL) and comes back on the same port within the
// reconnect window while the workers run: the agents reconnect and the job
// completes. The order of the reconnects is forced to the one that keeps the
// round's ranks (group rank 0 first): the new musterd then forms the very
// round the workers run, and the first agent back hears Waiting before it.
TEST_F(ElasticE2eTest, AgentsReconnectToARestartedMusterd) {
  const int port = FreePort();
  auto server = std::make_unique<MusterdProcess>(port);
  ASSERT_TRUE(server->ready()) << server->proc().Output();
  const std::string pa = PidDir("reconnect-a"), pb = PidDir("reconnect-b");
  auto spec = [&](const std::string& pids) {
    return AgentSpec{.job = "reconnect",
                     .nnodes = "2",
                     .nproc = 2,
                     .rdzv_conf =
                         "last_call_timeout=1,keep_alive_interval=0.5,"
                         "keep_alive_max_attempt=10,reconnect_timeout=20",
                     .program = {BinPath("test_worker"), "--print-env",
                                 "--sleep=8", "--pid-dir=" + pids}};
  };
  auto a = StartAgent(*server, spec(pa));
  auto b = StartAgent(*server, spec(pb));
  std::vector<Subprocess*> both = {a.get(), b.get()};
  ASSERT_TRUE(WaitUntil(
      [&] {
        return RoundEnvs(a->Output(), 1).size() == 2 &&
               RoundEnvs(b->Output(), 1).size() == 2;
      },
      kFormDeadline))
      << AllOutput(both);
  Subprocess* first =
      RoundEnvs(a->Output(), 1)[0]["GROUP_RANK"] == "0" ? a.get() : b.get();
  Subprocess* second = first == a.get() ? b.get() : a.get();
  auto count = [](Subprocess* p, const std::string& text) {
    return LinesWith(p->Output(), text).size();
  };
  const size_t waiting_before = count(first, "waiting for nodes");

  second->Signal(SIGSTOP);
  const std::string first_server_log = server->proc().Output();
  server->proc().Kill();
  const absl::Time killed_at = absl::Now();
  const bool restarted = server->Start();
  std::cerr << "musterd back after "
            << absl::FormatDuration(absl::Now() - killed_at) << "\n";
  // Group rank 0 is back (and has heard Waiting) before group rank 1.
  const bool first_back = WaitUntil(
      [&] { return count(first, "waiting for nodes") > waiting_before; },
      absl::Seconds(15));
  second->Signal(SIGCONT);
  ASSERT_TRUE(restarted) << server->proc().Output();
  EXPECT_TRUE(first_back) << first->Output();

  EXPECT_THAT(WaitAll(both, kJobDeadline), ElementsAre(0, 0))
      << "(needs the agent's reconnect)" << AllOutput(both)
      << "\n----- first musterd -----\n"
      << first_server_log << "\n----- second musterd -----\n"
      << server->proc().Output();
  for (Subprocess* p : both) {
    std::cerr << "agent " << (p == first ? "group 0" : "group 1") << ": "
              << count(p, "env RANK=") / 2 << " attempt(s) of its workers\n";
  }
}

// 8b. The same while one node has already finished: its success, reported to
// the musterd that died, reaches the new one and the job completes.
TEST_F(ElasticE2eTest, ReportMadeBeforeMusterdDiedReachesTheRestartedOne) {
  const int port = FreePort();
  auto server = std::make_unique<MusterdProcess>(port);
  ASSERT_TRUE(server->ready()) << server->proc().Output();
  auto spec = [&](const std::string& sleep) {
    return AgentSpec{
        .job = "reconnect-report",
        .nnodes = "2",
        .nproc = 1,
        .rdzv_conf =
            "last_call_timeout=1,keep_alive_interval=0.5,"
            "keep_alive_max_attempt=10,reconnect_timeout=10",
        .program = {BinPath("test_worker"), "--print-env", "--sleep=" + sleep,
                    "--pid-dir=" + PidDir("reconnect-report")}};
  };
  auto fast = StartAgent(*server, spec("0.2"));
  auto slow = StartAgent(*server, spec("6"));
  std::vector<Subprocess*> both = {fast.get(), slow.get()};
  ASSERT_TRUE(
      fast->WaitForOutput("workers of this node succeeded", kFormDeadline))
      << AllOutput(both);
  const std::string first_server_log = server->proc().Output();
  server->proc().Kill();
  ASSERT_TRUE(server->Start()) << server->proc().Output();
  EXPECT_THAT(WaitAll(both, kJobDeadline), ElementsAre(0, 0))
      << "(needs the agent's reconnect)" << AllOutput(both)
      << "\n----- first musterd -----\n"
      << first_server_log << "\n----- second musterd -----\n"
      << server->proc().Output();
}

// Runs a shell command; returns its stdout, and its exit status in *rc.
std::string Shell(const std::string& cmd, int* rc) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) {
    *rc = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  const int status = pclose(f);
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// Destroys (ss -K) the TCP connections that process `pid` holds to `port` on
// 127.0.0.1, as a network fault would break them. Returns how many it found,
// or -1 when ss cannot do it here (no ss, or a kernel without
// CONFIG_INET_DIAG_DESTROY).
int BreakConnections(pid_t pid, int port) {
  int rc = 0;
  const std::string list = Shell(
      absl::StrCat("ss -tnpH state established dport = :", port, " 2>&1"), &rc);
  if (rc != 0) return -1;
  int broken = 0;
  for (const std::string& line :
       LinesWith(list, absl::StrCat("pid=", pid, ","))) {
    // "0 0 [::ffff:127.0.0.1]:46532 [::ffff:127.0.0.1]:21771 users:(...)"
    std::vector<std::string> cols =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (cols.size() < 4) continue;
    const std::string local = cols[2];
    const std::string local_port = local.substr(local.rfind(':') + 1);
    Shell(absl::StrCat("ss -K state established dport = :", port,
                       " sport = :", local_port, " >/dev/null 2>&1"),
          &rc);
    if (rc != 0) return -1;
    ++broken;
  }
  return broken;
}

// 8c. A transient loss of one agent's connection while musterd stays up: the
// agent reconnects with the same node id and the job completes (the round
// carries on, or re-forms with both nodes).
TEST_F(ElasticE2eTest, AgentReconnectsAfterItsConnectionBreaks) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready()) << server.proc().Output();
  const int port = server.port();
  AgentSpec spec{
      .job = "blip",
      .nnodes = "2",
      .nproc = 1,
      .rdzv_conf = testing::FastRdzvConf() + ",reconnect_timeout=20",
      .program = {BinPath("test_worker"), "--print-env", "--sleep=4"}};
  auto a = StartAgent(server, spec);
  auto b = StartAgent(server, spec);
  std::vector<Subprocess*> both = {a.get(), b.get()};
  ASSERT_TRUE(WaitUntil(
      [&] {
        return RoundEnvs(a->Output(), 1).size() == 1 &&
               RoundEnvs(b->Output(), 1).size() == 1;
      },
      kFormDeadline))
      << AllOutput(both);
  const std::string node_id = NodeIdOf(*a);
  const int broken = BreakConnections(a->pid(), port);
  if (broken < 0) GTEST_SKIP() << "ss -K cannot destroy sockets here";
  ASSERT_GT(broken, 0) << "no connection of the agent to musterd found";
  EXPECT_TRUE(a->WaitForOutput("reconnected", kFormDeadline)) << a->Output();
  EXPECT_THAT(WaitAll(both, kJobDeadline), ElementsAre(0, 0))
      << AllOutput(both) << "\n----- musterd -----\n"
      << server.proc().Output();
  // The same node came back: musterd saw its id join again, no other id.
  EXPECT_EQ(NodeIdOf(*a), node_id);
  EXPECT_GE(LinesWith(server.proc().Output(), node_id).size(), 2u)
      << server.proc().Output();
  std::cerr << "after the break: "
            << (LatestRound(a->Output()) == 1 ? "the round carried on"
                                              : "the round re-formed")
            << "\n";
}

// 9a. Two jobs on one musterd stay isolated: each sees only its own ranks,
// and a failure in one does not disturb the other.
TEST_F(ElasticE2eTest, TwoJobsOnOneMusterdStayIsolated) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready()) << server.proc().Output();
  const std::string dir = MakeTempDir("elastic-iso");
  AgentSpec ok_spec{
      .job = "iso-ok",
      .nnodes = "2",
      .nproc = 2,
      .program = {BinPath("test_worker"), "--print-env", "--sleep=4"}};
  // The other job fails at once, while the first one's workers run.
  AgentSpec bad_spec{
      .job = "iso-bad",
      .nnodes = "2",
      .nproc = 1,
      .program = {BinPath("test_worker"), "--print-env", "--sleep=0.5",
                  "--fail-rank=0", "--exit-code=5"}};
  auto ok1 = StartAgent(server, ok_spec);
  auto bad1 = StartAgent(server, bad_spec);
  auto ok2 = StartAgent(server, ok_spec);
  auto bad2 = StartAgent(server, bad_spec);
  std::vector<Subprocess*> all = {ok1.get(), ok2.get(), bad1.get(), bad2.get()};
  EXPECT_THAT(WaitAll(all, kJobDeadline), ElementsAre(0, 0, 1, 1))
      << AllOutput(all);

  std::set<int> ok_ranks, bad_ranks;
  for (Subprocess* p : {ok1.get(), ok2.get()}) {
    auto envs = EnvBlocks(p->Output());
    EXPECT_EQ(envs.size(), 2u) << "the failure of the other job restarted "
                                  "this one\n"
                               << p->Output();
    for (WorkerEnv& e : envs) {
      ok_ranks.insert(std::stoi(e["RANK"]));
      EXPECT_EQ(e["WORLD_SIZE"], "4");
      EXPECT_EQ(e["TORCHELASTIC_RUN_ID"], "iso-ok");
      EXPECT_EQ(e["MUSTER_STORE_PREFIX"], "iso-ok/1");
      EXPECT_EQ(e["MUSTER_ROUND"], "1");
    }
  }
  for (Subprocess* p : {bad1.get(), bad2.get()}) {
    for (WorkerEnv& e : EnvBlocks(p->Output())) {
      bad_ranks.insert(std::stoi(e["RANK"]));
      EXPECT_EQ(e["WORLD_SIZE"], "2");
      EXPECT_EQ(e["TORCHELASTIC_RUN_ID"], "iso-bad");
      EXPECT_EQ(e["MUSTER_STORE_PREFIX"], "iso-bad/1");
    }
    EXPECT_THAT(p->Output(), HasSubstr("code 5"));
  }
  EXPECT_EQ(ok_ranks, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(bad_ranks, (std::set<int>{0, 1}));
}

// 9b. A job id reused with a different MIN:MAX is refused clearly (exit 2),
// and the job it collided with carries on.
TEST_F(ElasticE2eTest, JobIdReusedWithOtherSizesIsRefused) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready()) << server.proc().Output();
  AgentSpec spec{.job = "reused",
                 .nnodes = "2",
                 .nproc = 1,
                 .program = {BinPath("test_worker"), "--print-env"}};
  auto first = StartAgent(server, spec);
  ASSERT_TRUE(first->WaitForOutput("waiting for nodes", kFormDeadline))
      << first->Output();

  AgentSpec other = spec;
  other.nnodes = "3:4";
  auto intruder = StartAgent(server, other);
  EXPECT_EQ(intruder->WaitOrKill(kExitDeadline), 2) << intruder->Output();
  const std::string out = intruder->Output();
  EXPECT_THAT(out, HasSubstr("reused"));
  EXPECT_THAT(out, HasSubstr("--nnodes=3:4"));
  EXPECT_THAT(out, HasSubstr("--nnodes=2"));
  EXPECT_THAT(out, HasSubstr("another --rdzv-id"));
  EXPECT_TRUE(first->Running()) << first->Output();

  auto second = StartAgent(server, spec);
  EXPECT_THAT(WaitAll({first.get(), second.get()}, kJobDeadline),
              ElementsAre(0, 0))
      << AllOutput({first.get(), second.get()});
}

// 9c. A long-lived musterd does not refuse a rerun: the same command, started
// again as soon as the job ended, runs again (with fresh round numbers).
TEST_F(ElasticE2eTest, FinishedJobIdCanBeRerunAtOnce) {
  MusterdProcess server;
  ASSERT_TRUE(server.ready()) << server.proc().Output();
  AgentSpec spec{.job = "rerun",
                 .nnodes = "2",
                 .nproc = 1,
                 .program = {BinPath("test_worker"), "--print-env"}};
  std::set<std::string> prefixes;
  for (int run = 0; run < 3; ++run) {
    auto a = StartAgent(server, spec);
    auto b = StartAgent(server, spec);
    std::vector<Subprocess*> both = {a.get(), b.get()};
    ASSERT_THAT(WaitAll(both, kJobDeadline), ElementsAre(0, 0))
        << "run " << run << AllOutput(both);
    for (Subprocess* p : both) {
      for (WorkerEnv& e : EnvBlocks(p->Output()))
        prefixes.insert(e["MUSTER_STORE_PREFIX"]);
    }
  }
  EXPECT_EQ(prefixes.size(), 3u) << "a rerun reused a store namespace";
}

}  // namespace
}  // namespace muster
