// The control channel's codec (muster/common/control_round.h) against the
// golden files tests/testdata/control/*.golden, which the Python tests
// (tests/python/control_test.py) parse too: a change of the format in C++
// without the golden fails here, a drift of Python's reader fails there.
#include "muster/common/control_round.h"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace muster::common {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Golden(const std::string& name) {
  const char* src = std::getenv("MUSTER_SOURCE_DIR");
  const std::string path = std::string(src != nullptr ? src : ".") +
                           "/tests/testdata/control/" + name;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

// round.golden: what the agent writes for tests/agent/worker_env_sample.h's
// NodeBRank1 with a token, first write.
ControlRound Running() {
  return ControlRound{.seq = 1,
                      .running = true,
                      .round = 7,
                      .rank = 4,
                      .world_size = 5,
                      .local_rank = 1,
                      .local_world_size = 2,
                      .group_rank = 1,
                      .group_world_size = 2,
                      .role_rank = 4,
                      .role_world_size = 5,
                      .master_addr = "10.0.0.1",
                      .master_port = 29500,
                      .store_endpoint = "10.0.0.1:29400",
                      .store_prefix = "job-42/2/",
                      .store_token = "secret-credential",
                      .restart_count = 2,
                      .reason = ""};
}

// round-changing.golden: the next write, changing with a reason, no token.
ControlRound Changing() {
  ControlRound info = Running();
  info.seq = 2;
  info.running = false;
  info.store_token.clear();
  info.reason = "node b lost";
  return info;
}

TEST(ControlRoundTest, FormatIsTheGolden) {
  EXPECT_EQ(FormatControlRound(Running()), Golden("round.golden"));
  EXPECT_EQ(FormatControlRound(Changing()), Golden("round-changing.golden"));
  EXPECT_EQ(FormatControlHello(12345, "libmuster_comm"),
            Golden("hello.golden"));
}

TEST(ControlRoundTest, ParseOfTheGoldenIsTheStruct) {
  absl::StatusOr<ControlRound> running =
      ParseControlRound(Golden("round.golden"));
  ASSERT_TRUE(running.ok()) << running.status();
  EXPECT_TRUE(*running == Running()) << "a field did not survive round.golden";
  absl::StatusOr<ControlRound> changing =
      ParseControlRound(Golden("round-changing.golden"));
  ASSERT_TRUE(changing.ok()) << changing.status();
  EXPECT_TRUE(*changing == Changing())
      << "a field did not survive round-changing.golden";
  EXPECT_EQ(ParseControlHelloPid(Golden("hello.golden")), 12345);
}

TEST(ControlRoundTest, EveryFieldSurvives) {
  // Every field set, a token and a reason both.
  ControlRound info = Running();
  info.reason = "r";
  absl::StatusOr<ControlRound> back =
      ParseControlRound(FormatControlRound(info));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == info) << "a field did not survive the round file";
}

TEST(ControlRoundTest, BadRoundFilesAreRefused) {
  // Unknown fields are ignored; a token is optional.
  EXPECT_TRUE(
      ParseControlRound(R"({"version":1,"seq":1,"state":"changing","round":2,)"
                        R"("rank":0,"world_size":2,"new_field":[1]})")
          .ok());
  for (
      const char* bad :
      {"", "{", "[]", R"({"version":2,"seq":1})",
       R"({"version":1,"seq":1,"state":"odd","round":1,"rank":0,"world_size":1})",
       R"({"version":1,"seq":"1","state":"running","round":1,"rank":0,"world_size":1})",
       R"({"version":1,"seq":1,"state":"running","round":1,"rank":0,"world_size":1})",
       R"({"version":1,"seq":1,"state":"running","round":1,"rank":3,"world_size":2,"store_endpoint":"a:1","store_prefix":"p","store_token":"SECRET"})"}) {
    absl::StatusOr<ControlRound> r = ParseControlRound(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << bad;
    EXPECT_THAT(r.status().message(), Not(HasSubstr("SECRET")));
  }
}

TEST(ControlRoundTest, HelloIsReadStrictly) {
  for (const char* bad :
       {"", "{", "[]", "{\"version\": 1}", "{\"pid\": 5}",
        "{\"version\": 2, \"pid\": 5}", "{\"version\": 1, \"pid\": \"5\"}"}) {
    EXPECT_FALSE(ParseControlHelloPid(bad).has_value()) << bad;
  }
  EXPECT_EQ(ParseControlHelloPid(
                R"({"version": 1, "pid": 7, "library": "muster.torch"})"),
            7);
}

}  // namespace
}  // namespace muster::common
