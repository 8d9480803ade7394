// Lease fencing, musterd's side (rendezvous/src/core/lease.h), on the
// Coordinator with fake channels and a FakeClock: a silent node is lost only
// once its lease has passed, a closed stream at once; renewals are rationed to
// about four per lease; a member that reports its workers fenced ends the
// round; an agent that takes RoundReady as a renewal is renewed only while in a
// round.
#include "rendezvous/src/core/lease.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/platform/clock.h"
#include "muster/rendezvous/coordinator.h"
#include "tests/testing/fake_channel.h"

namespace muster::rendezvous {
namespace {

using ::muster::testing::FakeChannel;
using ::testing::HasSubstr;
using Kind = FakeChannel::Kind;

class LeaseTest : public ::testing::Test {
 protected:
  LeaseTest() : coord_(Options(), &clock_) {}
  static CoordinatorOptions Options() {
    CoordinatorOptions o;
    o.default_last_call_timeout = absl::ZeroDuration();
    return o;
  }
  static v1::Join MakeJoin(const std::string& node, int64_t lease_ms) {
    v1::Join j;
    j.set_job_id("job");
    j.set_node_id(node);
    j.set_hostname(node);
    j.set_local_world_size(1);
    j.set_min_nodes(2);
    j.set_max_nodes(2);
    j.set_node_rank_hint(-1);
    j.set_heartbeat_interval_ms(250);
    j.set_heartbeat_timeout_ms(1000);
    j.set_lease_timeout_ms(lease_ms);
    return j;
  }
  struct Agent {
    ConnectionId conn;
    std::shared_ptr<FakeChannel> ch;
  };
  Agent Join(const std::string& node, int64_t lease_ms = 3000) {
    Agent a{next_conn_++, std::make_shared<FakeChannel>()};
    EXPECT_TRUE(coord_.OnJoin(a.conn, MakeJoin(node, lease_ms), a.ch).ok());
    coord_.Tick();
    return a;
  }
  // Two agents in round 1.
  void FormRound() {
    a_ = Join("a");
    b_ = Join("b");
    ASSERT_EQ(a_.ch->last().kind_case(), Kind::kRoundReady);
    ASSERT_EQ(b_.ch->last().kind_case(), Kind::kRoundReady);
  }

  FakeClock clock_;
  Coordinator coord_;
  ConnectionId next_conn_ = 1;
  Agent a_, b_;
};

TEST_F(LeaseTest, ASilentMemberIsLostOnlyOnceItsLeaseHasPassed) {
  FormRound();
  // b goes silent (a network cut: no FIN); a keeps beating.
  for (int i = 0; i < 11; ++i) {
    clock_.Advance(absl::Milliseconds(250));
    coord_.OnHeartbeat(a_.conn, v1::Heartbeat());
    coord_.Tick();
  }
  // 2.75 s: past b's heartbeat timeout (1 s), not past its 3 s lease.
  EXPECT_EQ(a_.ch->count(Kind::kRestart), 0)
      << "a silent node was declared lost before its lease ended";
  clock_.Advance(absl::Milliseconds(250));
  coord_.OnHeartbeat(a_.conn, v1::Heartbeat());
  coord_.Tick();
  ASSERT_EQ(a_.ch->count(Kind::kRestart), 1);
  EXPECT_THAT(a_.ch->last().restart().reason(),
              HasSubstr("no heartbeat for 3s"));
}

TEST_F(LeaseTest, AClosedStreamIsLostAtOnce) {
  FormRound();
  coord_.OnDisconnect(b_.conn);
  EXPECT_EQ(a_.ch->count(Kind::kRestart), 1);
}

TEST_F(LeaseTest, RenewalsComeAboutFourTimesPerLease) {
  FormRound();
  v1::Heartbeat hb;
  int renewals = 0;
  // 12 s of heartbeats every 250 ms with a 3 s lease: one renewal per 750 ms.
  for (int i = 0; i < 48; ++i) {
    clock_.Advance(absl::Milliseconds(250));
    hb.set_seq(i + 1);
    renewals += coord_.OnHeartbeat(a_.conn, hb) ? 1 : 0;
  }
  EXPECT_EQ(renewals, 16);
  // An unknown stream renews nothing.
  EXPECT_FALSE(coord_.OnHeartbeat(999, hb));
}

// Rounds that re-form faster than lease/4 (a rejoin after each Restart,
// without a lease_seq, on the same stream) do not put renewals off: the
// heartbeats in between still renew about every lease/4. Before, every rejoin
// moved the next renewal lease/4 away and the agent fenced (chaos test).
TEST_F(LeaseTest, RejoinsWithoutASeqDoNotStarveTheLease) {
  FormRound();
  v1::Heartbeat hb;
  absl::Time last_renewal = clock_.Now();
  absl::Duration longest;
  for (int i = 0; i < 48; ++i) {
    clock_.Advance(absl::Milliseconds(250));
    if (i % 2 == 1) {  // a rejoin every 500 ms (3 s lease: renewals at 750 ms)
      ASSERT_TRUE(coord_.OnJoin(a_.conn, MakeJoin("a", 3000), a_.ch).ok());
    } else {
      hb.set_seq(i + 1);
      if (coord_.OnHeartbeat(a_.conn, hb)) {
        longest = std::max(longest, clock_.Now() - last_renewal);
        last_renewal = clock_.Now();
      }
    }
  }
  longest = std::max(longest, clock_.Now() - last_renewal);
  EXPECT_LE(longest, absl::Seconds(1)) << "the lease (3 s) was starved";
}

TEST_F(LeaseTest, ANodeDeclaredLostIsNotRenewed) {
  FormRound();
  clock_.Advance(absl::Seconds(4));
  coord_.OnHeartbeat(a_.conn, v1::Heartbeat());
  coord_.Tick();  // b is lost
  ASSERT_EQ(a_.ch->count(Kind::kRestart), 1);
  EXPECT_FALSE(coord_.OnHeartbeat(b_.conn, v1::Heartbeat()))
      << "a late heartbeat of a lost node must not renew its lease";
}

TEST_F(LeaseTest, BadLeasesAreRefusedNamingTheKey) {
  for (int64_t ms : {int64_t{500}, int64_t{-1}, int64_t{61000}}) {
    absl::Status s = coord_.OnJoin(next_conn_++, MakeJoin("x", ms),
                                   std::make_shared<FakeChannel>());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << ms;
    EXPECT_THAT(s.message(), HasSubstr("lease_timeout"));
    EXPECT_THAT(s.message(), HasSubstr("from 1s to 1m"));
  }
  // 0: the server's default.
  EXPECT_TRUE(coord_
                  .OnJoin(next_conn_++, MakeJoin("y", 0),
                          std::make_shared<FakeChannel>())
                  .ok());
}

TEST_F(LeaseTest, AMemberWhoseWorkersWereFencedEndsTheRound) {
  FormRound();
  // b reconnects on a new stream: its workers of round 1 were stopped.
  v1::Join again = MakeJoin("b", 3000);
  v1::RoundClaim* claim = again.mutable_claim();
  *claim->mutable_round() = b_.ch->last().round_ready();
  claim->set_workers_running(false);
  auto ch = std::make_shared<FakeChannel>();
  ASSERT_TRUE(coord_.OnJoin(next_conn_++, again, ch).ok());
  ASSERT_EQ(a_.ch->count(Kind::kRestart), 1);
  EXPECT_THAT(a_.ch->last().restart().reason(), HasSubstr("lease fence"));
  EXPECT_EQ(a_.ch->last().restart().restart_count(), 0)
      << "a fence is a membership change, not a worker failure";
}

TEST_F(LeaseTest, AMemberWhoseWorkersRunKeepsItsRoundOnReconnect) {
  FormRound();
  v1::Join again = MakeJoin("b", 3000);
  *again.mutable_claim()->mutable_round() = b_.ch->last().round_ready();
  again.mutable_claim()->set_workers_running(true);
  auto ch = std::make_shared<FakeChannel>();
  ASSERT_TRUE(coord_.OnJoin(next_conn_++, again, ch).ok());
  EXPECT_EQ(a_.ch->count(Kind::kRestart), 0);
  EXPECT_EQ(ch->last().kind_case(), Kind::kRoundReady);
}

// Agents that set Join.lease_from_round_ready: no renewal while they wait,
// the RoundReady carries the last seq each sent, then renewals every lease/4
// until a Restart, and none again until the next RoundReady.
class RoundReadyLeaseTest : public LeaseTest {
 protected:
  Agent JoinNew(const std::string& node, int64_t seq) {
    Agent a{next_conn_++, std::make_shared<FakeChannel>()};
    v1::Join j = MakeJoin(node, 3000);
    j.set_lease_from_round_ready(true);
    j.set_lease_seq(seq);
    EXPECT_TRUE(coord_.OnJoin(a.conn, j, a.ch).ok());
    return a;
  }
  // Heartbeats of `a` every 250 ms for `n` beats from seq `first`; returns
  // how many were renewed.
  int Beat(const Agent& a, int64_t first, int n) {
    int renewed = 0;
    v1::Heartbeat hb;
    for (int i = 0; i < n; ++i) {
      clock_.Advance(absl::Milliseconds(250));
      hb.set_seq(first + i);
      renewed += coord_.OnHeartbeat(a.conn, hb) ? 1 : 0;
      coord_.Tick();
    }
    return renewed;
  }
};

TEST_F(RoundReadyLeaseTest, AWaitingAgentIsRenewedOnlyByItsRoundReady) {
  Agent a = JoinNew("a", 100);
  // 3 s of waiting (a 3 s lease: 4 renewals for an older agent).
  EXPECT_EQ(Beat(a, 1, 12), 0) << "a waiting agent was sent LeaseRenewed";
  Agent b = JoinNew("b", 200);
  ASSERT_EQ(a.ch->last().kind_case(), Kind::kRoundReady);
  EXPECT_EQ(a.ch->last().round_ready().lease_seq(), 12)
      << "RoundReady must renew the last heartbeat the server received";
  ASSERT_EQ(b.ch->last().kind_case(), Kind::kRoundReady);
  EXPECT_EQ(b.ch->last().round_ready().lease_seq(), 200) << "b's Join";
  // In the round: renewed about every lease/4 (750 ms), from the first
  // heartbeat on (a's next renewal was due long ago): at 0.25, 0.75, 1.5 and
  // 2.25 s. (2.5 s: b, silent, is not lost yet.)
  EXPECT_EQ(Beat(a, 13, 10), 4);
  // Restart (b is lost): a waits again, unrenewed, on its rejoin.
  coord_.OnDisconnect(b.conn);
  ASSERT_EQ(a.ch->last().kind_case(), Kind::kRestart);
  v1::Join rejoin = MakeJoin("a", 3000);
  rejoin.set_lease_from_round_ready(true);
  ASSERT_TRUE(coord_.OnJoin(a.conn, rejoin, a.ch).ok());
  EXPECT_EQ(Beat(a, 23, 8), 0);
  Agent c = JoinNew("c", 300);
  ASSERT_EQ(a.ch->last().kind_case(), Kind::kRoundReady);
  EXPECT_EQ(a.ch->last().round_ready().lease_seq(), 30);
  EXPECT_EQ(c.ch->last().round_ready().lease_seq(), 300);
  EXPECT_GT(Beat(a, 31, 4), 0);
}

TEST_F(RoundReadyLeaseTest, AnOlderAgentIsRenewedWhileItWaits) {
  Agent a = Join("a");  // no lease_from_round_ready
  EXPECT_EQ(Beat(a, 1, 12), 4);
}

TEST_F(RoundReadyLeaseTest, AClaimOfRunningWorkersIsRenewedWhileItWaits) {
  // A restarted musterd: a comes back claiming round 1, whose workers run;
  // the round waits for b (re-adoption), and a's lease must go on meanwhile.
  v1::Join j = MakeJoin("a", 3000);
  j.set_lease_from_round_ready(true);
  j.set_lease_seq(50);
  v1::RoundReady* claimed = j.mutable_claim()->mutable_round();
  claimed->set_round(1);
  claimed->set_group_world_size(2);
  claimed->set_world_size(2);
  claimed->set_store_prefix("job/1");
  j.mutable_claim()->set_workers_running(true);
  Agent a{next_conn_++, std::make_shared<FakeChannel>()};
  ASSERT_TRUE(coord_.OnJoin(a.conn, j, a.ch).ok());
  EXPECT_EQ(a.ch->count(Kind::kRoundReady), 0) << "still re-adopting";
  EXPECT_GE(Beat(a, 51, 8), 2);
}

TEST(LeaseRules, SilentLossWaitsForTheLongerOfHeartbeatTimeoutAndLease) {
  EXPECT_EQ(SilentLossTimeout(absl::Seconds(1), absl::Seconds(5)),
            absl::Seconds(5));
  EXPECT_EQ(SilentLossTimeout(absl::Seconds(15), absl::Seconds(5)),
            absl::Seconds(15));
  EXPECT_TRUE(ValidateLease(absl::Seconds(1), "x").ok());
  EXPECT_FALSE(ValidateLease(absl::Milliseconds(999), "x").ok());
}

}  // namespace
}  // namespace muster::rendezvous
