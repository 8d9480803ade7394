// Node sessions in the Coordinator: a Join for a connected node id from
// another stream must carry that node's session secret, and a stream's failure
// reports are attributed to its own node whatever node they name.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/platform/clock.h"
#include "muster/rendezvous/auth.h"
#include "muster/rendezvous/coordinator.h"
#include "tests/testing/fake_channel.h"
#include "tests/testing/join.h"

namespace muster::rendezvous {
namespace {

using ::muster::testing::FakeChannel;
using ::testing::HasSubstr;
using Kind = FakeChannel::Kind;

class CoordinatorSessionTest : public ::testing::Test {
 protected:
  CoordinatorSessionTest() : coord_(Options(), &clock_) {}

  static CoordinatorOptions Options() {
    CoordinatorOptions o;
    o.default_heartbeat_timeout = absl::Hours(10);
    return o;
  }

  static v1::Join MakeJoin(const std::string& node, const std::string& secret) {
    return muster::testing::MakeJoin({.node_id = node,
                                      .hostname = "host-" + node,
                                      .advertised_addr = "10.0.0.1",
                                      .local_world_size = 2,
                                      .min_nodes = 2,
                                      .max_nodes = 2,
                                      .session_secret = secret});
  }

  std::shared_ptr<FakeChannel> Join(ConnectionId conn, const v1::Join& join,
                                    absl::Status* status) {
    auto ch = std::make_shared<FakeChannel>();
    *status = coord_.OnJoin(conn, join, ch);
    return ch;
  }

  // Two nodes a and b in a RUNNING round 1.
  void StartTwoNodeRound() {
    absl::Status s;
    a_ = Join(1, MakeJoin("a", secret_a_), &s);
    ASSERT_TRUE(s.ok()) << s;
    b_ = Join(2, MakeJoin("b", secret_b_), &s);
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(coord_.Status("job").jobs(0).state(), "RUNNING");
  }

  FakeClock clock_;
  Coordinator coord_;
  const std::string secret_a_ = NewRandomSecret();
  const std::string secret_b_ = NewRandomSecret();
  std::shared_ptr<FakeChannel> a_, b_;
};

TEST_F(CoordinatorSessionTest, TakeoverWithoutTheSecretIsRefusedAndHarmless) {
  StartTwoNodeRound();
  for (const std::string& presented : {std::string(), NewRandomSecret()}) {
    absl::Status s;
    auto thief = Join(10, MakeJoin("a", presented), &s);
    EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("session secret"));
    EXPECT_THAT(std::string(s.message()), ::testing::Not(HasSubstr(secret_a_)));
    EXPECT_TRUE(thief->messages().empty());
  }
  // Nothing happened to the members: no Restart, no close, still RUNNING.
  EXPECT_FALSE(a_->closed().has_value());
  EXPECT_FALSE(b_->closed().has_value());
  EXPECT_EQ(a_->count(Kind::kRestart), 0);
  EXPECT_EQ(b_->count(Kind::kRestart), 0);
  v1::JobStatus st = coord_.Status("job").jobs(0);
  EXPECT_EQ(st.state(), "RUNNING");
  EXPECT_EQ(st.round(), 1);
  EXPECT_EQ(coord_.ConnectedAgents(), 2);
}

TEST_F(CoordinatorSessionTest, ReconnectWithTheSecretKeepsThePlace) {
  StartTwoNodeRound();
  absl::Status s;
  auto again = Join(11, MakeJoin("a", secret_a_), &s);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(again->count(Kind::kRoundReady), 1);
  EXPECT_EQ(a_->closed()->code(), absl::StatusCode::kAborted);
  EXPECT_EQ(b_->count(Kind::kRestart), 0);
  EXPECT_EQ(coord_.Status("job").jobs(0).state(), "RUNNING");
}

TEST_F(CoordinatorSessionTest, FailuresAreAttributedToTheReportingStream) {
  StartTwoNodeRound();
  v1::WorkersFailed spoof;
  spoof.set_round(1);
  v1::WorkerFailure* f = spoof.add_failures();
  f->set_node_id("a");  // b claims a's worker failed
  f->set_hostname("host-a");
  f->set_global_rank(0);
  f->set_exit_code(3);
  coord_.OnWorkersFailed(2, spoof);
  v1::JobStatus st = coord_.Status("job").jobs(0);
  EXPECT_EQ(st.state(), "FAILED");  // max_restarts 0
  EXPECT_THAT(st.last_failure(), HasSubstr("host-b"));
  EXPECT_THAT(st.last_failure(), ::testing::Not(HasSubstr("host-a")));
}

TEST_F(CoordinatorSessionTest, ReportsFromAStreamThatIsNoMemberAreIgnored) {
  StartTwoNodeRound();
  absl::Status s;
  // A third stream of the same job cannot even join as a member (max 2): it
  // waits as a spare; its failure reports are not a member's.
  auto spare = Join(12, MakeJoin("c", NewRandomSecret()), &s);
  ASSERT_TRUE(s.ok()) << s;
  v1::WorkersFailed report;
  report.set_round(1);
  report.add_failures()->set_exit_code(1);
  coord_.OnWorkersFailed(12, report);
  coord_.OnWorkersFailed(999, report);  // no stream at all
  EXPECT_EQ(coord_.Status("job").jobs(0).state(), "RUNNING");
  EXPECT_EQ(a_->count(Kind::kRestart), 0);
}

TEST_F(CoordinatorSessionTest, LegacyAgentsWithoutSecretsReplaceAsBefore) {
  absl::Status s;
  auto first = Join(1, MakeJoin("a", ""), &s);
  ASSERT_TRUE(s.ok());
  auto second = Join(2, MakeJoin("a", ""), &s);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(first->closed()->code(), absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace muster::rendezvous
