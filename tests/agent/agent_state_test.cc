// The agent's transition table (agent/src/agent_state.h): exactly the edges
// of the diagram are allowed, every other pair is rejected; and the agent's
// side of the control channel (agent/src/control_channel.h): `round` as the
// contract writes it, seq growing, mode 0600, `hello` read strictly.
#include "agent/src/agent_state.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#include "agent/src/control_channel.h"
#include "gtest/gtest.h"
#include "muster/platform/files.h"
#include "nlohmann/json.hpp"
#include "tests/agent/worker_env_sample.h"

namespace muster::agent {
namespace {

constexpr AgentState kAll[] = {AgentState::kJoining, AgentState::kRunning,
                               AgentState::kReported, AgentState::kKeeping};

TEST(AgentStateTest, TheTableHasExactlyTheDiagramsEdges) {
  using S = AgentState;
  const std::set<std::pair<S, S>> allowed = {
      {S::kJoining, S::kRunning},  {S::kRunning, S::kRunning},
      {S::kReported, S::kRunning}, {S::kRunning, S::kReported},
      {S::kJoining, S::kReported}, {S::kReported, S::kReported},
      {S::kRunning, S::kJoining},  {S::kReported, S::kJoining},
      {S::kJoining, S::kJoining},  {S::kRunning, S::kKeeping},
      {S::kKeeping, S::kRunning},  {S::kKeeping, S::kJoining},
  };
  int rejected = 0;
  for (S from : kAll) {
    for (S to : kAll) {
      const bool want = allowed.contains({from, to});
      EXPECT_EQ(TransitionAllowed(from, to), want)
          << AgentStateName(from) << " -> " << AgentStateName(to);
      rejected += !want;
    }
  }
  // The forbidden ones: only RUNNING keeps workers (not JOINING, REPORTED
  // or KEEPING itself), and kept workers are never "reported".
  EXPECT_EQ(rejected, 4);
  EXPECT_FALSE(TransitionAllowed(S::kJoining, S::kKeeping));
  EXPECT_FALSE(TransitionAllowed(S::kReported, S::kKeeping));
  EXPECT_FALSE(TransitionAllowed(S::kKeeping, S::kKeeping));
  EXPECT_FALSE(TransitionAllowed(S::kKeeping, S::kReported));
}

TEST(AgentStateTest, NamesAreThoseOfHealthz) {
  EXPECT_STREQ(AgentStateName(AgentState::kJoining), "JOINING");
  EXPECT_STREQ(AgentStateName(AgentState::kRunning), "RUNNING");
  EXPECT_STREQ(AgentStateName(AgentState::kReported), "REPORTED");
  EXPECT_STREQ(AgentStateName(AgentState::kKeeping), "KEEPING");
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

// tests/testdata/control/`name` (tests/common/control_round_test.cc checks the
// codec against it; tests/python/control_test.py parses it).
std::string Golden(const std::string& name) {
  const char* src = std::getenv("MUSTER_SOURCE_DIR");
  return Slurp(std::string(src != nullptr ? src : ".") +
               "/tests/testdata/control/" + name);
}

TEST(ControlChannelTest, WritesRoundAsTheContractSays) {
  auto tmp = platform::MakeTempDirectory("control-test-");
  ASSERT_TRUE(tmp.ok());
  const std::string dir = *tmp + "/attempt_0/1/control";
  auto channel = ControlChannel::Create(dir);
  ASSERT_TRUE(channel.ok()) << channel.status();
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700);

  WorkerEnvParams p = NodeBRank1();
  p.store_token = "secret-credential";
  ASSERT_TRUE(channel->Write(ControlState::kRunning, p, "").ok());
  nlohmann::json j = nlohmann::json::parse(Slurp(dir + "/round"));
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["seq"], 1);
  EXPECT_EQ(j["state"], "running");
  EXPECT_EQ(j["round"], 7);
  EXPECT_EQ(j["rank"], 4);
  EXPECT_EQ(j["world_size"], 5);
  EXPECT_EQ(j["local_rank"], 1);
  EXPECT_EQ(j["local_world_size"], 2);
  EXPECT_EQ(j["group_rank"], 1);
  EXPECT_EQ(j["group_world_size"], 2);
  EXPECT_EQ(j["role_rank"], 4);
  EXPECT_EQ(j["role_world_size"], 5);
  EXPECT_EQ(j["master_addr"], "10.0.0.1");
  EXPECT_EQ(j["master_port"], 29500);
  EXPECT_EQ(j["store_endpoint"], "10.0.0.1:29400");
  EXPECT_EQ(j["store_prefix"], "job-42/2/");
  EXPECT_EQ(j["store_token"], "secret-credential");
  EXPECT_EQ(j["restart_count"], 2);
  EXPECT_FALSE(j.contains("reason"));
  // Byte for byte the golden that comm's and Python's readers parse.
  EXPECT_EQ(Slurp(dir + "/round"), Golden("round.golden"));
  ASSERT_EQ(stat((dir + "/round").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);

  p.store_token.clear();
  ASSERT_TRUE(channel->Write(ControlState::kChanging, p, "node b lost").ok());
  j = nlohmann::json::parse(Slurp(dir + "/round"));
  EXPECT_EQ(j["seq"], 2);
  EXPECT_EQ(j["state"], "changing");
  EXPECT_EQ(j["reason"], "node b lost");
  EXPECT_FALSE(j.contains("store_token"));
  EXPECT_EQ(Slurp(dir + "/round"), Golden("round-changing.golden"));
  EXPECT_EQ(channel->seq(), 2);
  std::filesystem::remove_all(*tmp);
}

TEST(ControlChannelTest, HelloIsReadStrictly) {
  auto tmp = platform::MakeTempDirectory("control-test-");
  ASSERT_TRUE(tmp.ok());
  auto channel = ControlChannel::Create(*tmp + "/control");
  ASSERT_TRUE(channel.ok());
  EXPECT_FALSE(channel->HelloPid().has_value());  // none yet
  const std::string hello = channel->dir() + "/hello";
  for (const char* bad : {"", "{", "[]", "{\"version\": 1}", "{\"pid\": 5}",
                          "{\"version\": 1, \"pid\": \"5\"}"}) {
    ASSERT_TRUE(platform::WriteFileAtomically(hello, bad).ok());
    EXPECT_FALSE(channel->HelloPid().has_value()) << bad;
  }
  ASSERT_TRUE(
      platform::WriteFileAtomically(
          hello, R"({"version": 1, "pid": 12345, "library": "libmuster_comm"})")
          .ok());
  EXPECT_EQ(channel->HelloPid(), 12345);
  std::filesystem::remove_all(*tmp);
}

}  // namespace
}  // namespace muster::agent
