// The heartbeat budget (muster/rendezvous/heartbeat_budget.h): the interval
// musterd suggests grows with the agents it serves, agents turn it into one
// that keeps the lease rule, and renewals keep coming on such heartbeats. On
// the Coordinator with fake channels and a FakeClock.
#include "muster/rendezvous/heartbeat_budget.h"

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "muster/platform/clock.h"
#include "muster/rendezvous/coordinator.h"
#include "tests/testing/fake_channel.h"
#include "tests/testing/join.h"

namespace muster::rendezvous {
namespace {

using ::muster::testing::FakeChannel;
using Kind = FakeChannel::Kind;

TEST(HeartbeatBudgetRules, TheSuggestionGrowsWithTheAgentsPastTheBudget) {
  constexpr int64_t kBudget = kDefaultHeartbeatBudgetPerSecond;  // 8,000/s
  EXPECT_EQ(SuggestedHeartbeatInterval(1, kBudget), absl::Milliseconds(250));
  EXPECT_EQ(SuggestedHeartbeatInterval(2000, kBudget), absl::Milliseconds(250));
  EXPECT_EQ(SuggestedHeartbeatInterval(3000, kBudget),
            absl::Milliseconds(400));  // 375 ms, on the 50 ms grid
  EXPECT_EQ(SuggestedHeartbeatInterval(10'000, kBudget),
            absl::Milliseconds(1250));
  EXPECT_EQ(SuggestedHeartbeatInterval(100'000, kBudget), absl::Seconds(12.5));
  EXPECT_EQ(SuggestedHeartbeatInterval(10'000, 0), absl::ZeroDuration())
      << "a zero budget suggests nothing";
}

TEST(HeartbeatBudgetRules, AFollowingAgentKeepsTheLeaseRule) {
  const absl::Duration own = absl::Milliseconds(250);
  const absl::Duration lease = absl::Seconds(5);
  // No suggestion (an older musterd), or a shorter one: its own interval.
  EXPECT_EQ(FollowedHeartbeatInterval(own, lease, absl::ZeroDuration()), own);
  EXPECT_EQ(FollowedHeartbeatInterval(own, lease, absl::Milliseconds(100)),
            own);
  // Longer: the shortest whole fraction of lease/4 (1.25 s) not shorter than
  // the suggestion, and never past lease/4 (at least 4 heartbeats per lease).
  EXPECT_EQ(FollowedHeartbeatInterval(own, lease, absl::Milliseconds(400)),
            absl::Milliseconds(416));  // 1250 / 3
  EXPECT_EQ(FollowedHeartbeatInterval(own, lease, absl::Milliseconds(600)),
            absl::Milliseconds(625));
  EXPECT_EQ(FollowedHeartbeatInterval(own, lease, absl::Milliseconds(1000)),
            absl::Milliseconds(1250));
  EXPECT_EQ(FollowedHeartbeatInterval(own, lease, absl::Seconds(12.5)),
            absl::Milliseconds(1250));
  // A 1 s lease leaves no room above 250 ms.
  EXPECT_EQ(FollowedHeartbeatInterval(own, absl::Seconds(1), absl::Seconds(2)),
            own);
  // An interval of its own longer than the suggestion stays.
  EXPECT_EQ(FollowedHeartbeatInterval(absl::Milliseconds(800), lease,
                                      absl::Milliseconds(700)),
            absl::Milliseconds(800));
  // Whatever the suggestion, lease/4 is a whole number of intervals.
  for (int ms = 250; ms <= 5000; ms += 50) {
    const absl::Duration i =
        FollowedHeartbeatInterval(own, lease, absl::Milliseconds(ms));
    EXPECT_LE(i, lease / 4) << ms;
    const double k = absl::FDivDuration(lease / 4, i);
    EXPECT_NEAR(k, std::round(k), 0.01) << ms;
  }
}

class HeartbeatBudgetTest : public ::testing::Test {
 protected:
  // 10 heartbeats a second for all agents: 3 agents get 300 ms.
  HeartbeatBudgetTest() : coord_(Options(), &clock_) {}
  static CoordinatorOptions Options() {
    CoordinatorOptions o;
    o.default_last_call_timeout = absl::ZeroDuration();
    o.heartbeat_budget_per_second = 10;
    return o;
  }
  static v1::Join MakeJoin(const std::string& node, int nodes) {
    v1::Join j = muster::testing::MakeJoin({.node_id = node,
                                            .min_nodes = nodes,
                                            .max_nodes = nodes,
                                            .heartbeat_interval_ms = 250,
                                            .heartbeat_timeout_ms = 1000});
    j.set_lease_timeout_ms(5000);
    return j;
  }
  std::shared_ptr<FakeChannel> Join(ConnectionId conn, const std::string& node,
                                    int nodes) {
    auto ch = std::make_shared<FakeChannel>();
    EXPECT_TRUE(coord_.OnJoin(conn, MakeJoin(node, nodes), ch).ok());
    return ch;
  }

  FakeClock clock_;
  Coordinator coord_;
};

TEST_F(HeartbeatBudgetTest, WaitingAndRoundReadyCarryTheCurrentSuggestion) {
  std::vector<std::shared_ptr<FakeChannel>> ch;
  for (int i = 0; i < 30; ++i)
    ch.push_back(Join(i + 1, absl::StrCat("n", i), 30));
  // The first joiner, alone, already hears the job's size (30 nodes: 3 s at
  // 10 a second), not 250 ms: a large round does not form at 4 beats a second.
  ASSERT_EQ(ch[0]->messages().front().kind_case(), Kind::kWaiting);
  EXPECT_EQ(ch[0]->messages().front().waiting().heartbeat_interval_ms(), 3000);
  // Everyone's RoundReady: 30 agents, 3 s; LeaseRenewed says the same.
  for (int i = 0; i < 30; ++i) {
    ASSERT_EQ(ch[i]->last().kind_case(), Kind::kRoundReady) << i;
    EXPECT_EQ(ch[i]->last().round_ready().heartbeat_interval_ms(), 3000) << i;
  }
  EXPECT_EQ(coord_.SuggestedHeartbeatInterval(), absl::Seconds(3));
  EXPECT_EQ(coord_.SuggestedHeartbeatInterval(1), absl::Seconds(3));
  // Another job's agent counts too: 31 connected, 3.1 s for everyone.
  auto other = std::make_shared<FakeChannel>();
  v1::Join small = MakeJoin("x", 1);
  small.set_job_id("small");
  ASSERT_TRUE(coord_.OnJoin(100, small, other).ok());
  EXPECT_EQ(other->last().round_ready().heartbeat_interval_ms(), 3100);
  EXPECT_EQ(coord_.SuggestedHeartbeatInterval(1), absl::Milliseconds(3100));
  // Agents leave: the server-wide figure follows them down; the big job's
  // agents keep their job's size, the small job's agent gets the default.
  for (int i = 0; i < 28; ++i) coord_.OnDisconnect(i + 1);
  EXPECT_EQ(coord_.SuggestedHeartbeatInterval(), absl::Milliseconds(300));
  EXPECT_EQ(coord_.SuggestedHeartbeatInterval(29), absl::Seconds(3));
  coord_.OnDisconnect(29);
  coord_.OnDisconnect(30);
  EXPECT_EQ(coord_.SuggestedHeartbeatInterval(100), absl::Milliseconds(250));
}

TEST_F(HeartbeatBudgetTest, NoBudgetSuggestsNothing) {
  CoordinatorOptions o = Options();
  o.heartbeat_budget_per_second = 0;
  Coordinator coord(o, &clock_);
  auto ch = std::make_shared<FakeChannel>();
  ASSERT_TRUE(coord.OnJoin(1, MakeJoin("a", 1), ch).ok());
  ASSERT_EQ(ch->last().kind_case(), Kind::kRoundReady);
  EXPECT_EQ(ch->last().round_ready().heartbeat_interval_ms(), 0);
  EXPECT_EQ(coord.SuggestedHeartbeatInterval(), absl::ZeroDuration());
}

TEST_F(HeartbeatBudgetTest, HeartbeatsWithoutASeqAreNeverRenewed) {
  Join(1, "a", 1);
  v1::Heartbeat hb;  // seq 0: the agent asked for no LeaseRenewed
  for (int i = 0; i < 40; ++i) {
    clock_.Advance(absl::Milliseconds(250));
    EXPECT_FALSE(coord_.OnHeartbeat(1, hb)) << i;
  }
  hb.set_seq(41);
  EXPECT_TRUE(coord_.OnHeartbeat(1, hb))
      << "the first heartbeat with a seq after lease/4 is renewed";
}

// An agent that follows the budget to lease/4 (1.25 s for a 5 s lease)
// heartbeats once per renewal period; heartbeats that arrive a little early
// or late (jitter of +-100 ms) must each be renewed, or the lease would go
// 2.5 s without a renewal and the agent fence sooner than at 250 ms.
TEST_F(HeartbeatBudgetTest, HeartbeatsEveryLeaseQuarterAreEachRenewed) {
  Join(1, "a", 1);
  std::mt19937 rng(15);
  std::uniform_int_distribution<int> jitter_ms(-100, 100);
  const absl::Time start = clock_.Now();
  v1::Heartbeat hb;
  absl::Time last_renewal = start;
  absl::Duration longest;
  for (int i = 1; i <= 40; ++i) {
    const absl::Time at = start + absl::Milliseconds(1250 * i + jitter_ms(rng));
    clock_.Advance(at - clock_.Now());
    hb.set_seq(i);
    if (coord_.OnHeartbeat(1, hb)) {
      longest = std::max(longest, clock_.Now() - last_renewal);
      last_renewal = clock_.Now();
    }
  }
  EXPECT_LE(longest, absl::Milliseconds(1450));
}

}  // namespace
}  // namespace muster::rendezvous
