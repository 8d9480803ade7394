// Re-adoption after a musterd restart (issue 11 item 4), on the Coordinator
// with fake channels and a FakeClock: a server that does not know a job hears
// its agents claim their RUNNING round (Join.claim) and runs it on unchanged
// once every member is back; a claim that does not fit, a member whose
// workers stopped, or the grace passing forms the next round instead.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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
using Kind = FakeChannel::Kind;

class AdoptionTest : public ::testing::Test {
 protected:
  AdoptionTest() : first_(Options(), &clock_), restarted_(Options(), &clock_) {}
  static CoordinatorOptions Options() {
    CoordinatorOptions o;
    o.default_last_call_timeout = absl::Seconds(30);
    o.adoption_grace = absl::Seconds(5);
    o.default_heartbeat_timeout = absl::Hours(10);  // no silent losses here
    o.default_lease_timeout = absl::Hours(10);
    return o;
  }
  static v1::Join MakeJoin(const std::string& node) {
    v1::Join j;
    j.set_job_id("job");
    j.set_node_id(node);
    j.set_hostname(node);
    j.set_advertised_addr("10.0.0." + std::to_string(node[0] - 'a' + 1));
    j.set_local_world_size(2);
    j.set_min_nodes(2);
    j.set_max_nodes(3);
    j.set_node_rank_hint(-1);
    j.set_max_restarts(3);
    j.set_master_port(29500 + node[0]);
    return j;
  }
  struct Agent {
    explicit Agent(v1::Join j) : join(std::move(j)) {}
    v1::Join join;
    ConnectionId conn = 0;
    std::shared_ptr<FakeChannel> ch;
    v1::RoundReady ready;
  };
  void Join(Coordinator& c, Agent& a) {
    a.conn = next_conn_++;
    a.ch = std::make_shared<FakeChannel>();
    ASSERT_TRUE(c.OnJoin(a.conn, a.join, a.ch).ok());
    c.Tick();
  }
  // Three agents in round 2 (after one worker failure) of the first server;
  // their claims as the agents would send them to a restarted one.
  void RunOnFirstServer() {
    for (const char* n : {"c", "a", "b"}) agents_.emplace_back(MakeJoin(n));
    for (Agent& a : agents_) Join(first_, a);
    v1::WorkersFailed failed;
    failed.set_round(1);
    first_.OnWorkersFailed(agents_[0].conn, failed);
    for (Agent& a : agents_) {
      ASSERT_EQ(a.ch->last().kind_case(), Kind::kRestart);
      Join(first_, a);  // rejoin on the same stream
    }
    for (Agent& a : agents_) {
      ASSERT_EQ(a.ch->last().kind_case(), Kind::kRoundReady);
      a.ready = a.ch->last().round_ready();
      ASSERT_EQ(a.ready.round(), 2);
      v1::RoundClaim* claim = a.join.mutable_claim();
      *claim->mutable_round() = a.ready;
      claim->mutable_round()->clear_peers();
      claim->set_workers_running(true);
    }
  }

  FakeClock clock_;
  Coordinator first_;
  Coordinator restarted_;
  ConnectionId next_conn_ = 1;
  std::vector<Agent> agents_;
};

TEST_F(AdoptionTest, EveryMemberBackRunsTheRoundOnUnchanged) {
  RunOnFirstServer();
  // They come back in another order than they first joined.
  Join(restarted_, agents_[2]);
  Join(restarted_, agents_[0]);
  EXPECT_EQ(agents_[2].ch->count(Kind::kRoundReady) +
                agents_[0].ch->count(Kind::kRoundReady),
            0)
      << "nothing runs before every member is back";
  Join(restarted_, agents_[1]);
  for (Agent& a : agents_) {
    ASSERT_EQ(a.ch->last().kind_case(), Kind::kRoundReady);
    const v1::RoundReady r = a.ch->last().round_ready();
    EXPECT_EQ(r.round(), 2);
    EXPECT_EQ(r.group_rank(), a.ready.group_rank());
    EXPECT_EQ(r.rank_offset(), a.ready.rank_offset());
    EXPECT_EQ(r.world_size(), 6);
    EXPECT_EQ(r.master_addr(), a.ready.master_addr());
    EXPECT_EQ(r.master_port(), a.ready.master_port());
    EXPECT_EQ(r.store_prefix(), "job/2");
    EXPECT_EQ(r.restart_count(), 1) << "the restart count survives";
  }
  auto status = restarted_.Status("job");
  ASSERT_EQ(status.jobs_size(), 1);
  EXPECT_EQ(status.jobs(0).state(), "RUNNING");
  EXPECT_EQ(status.jobs(0).round(), 2);
  // And it ends as any round does.
  for (Agent& a : agents_) {
    v1::WorkersSucceeded ok;
    ok.set_round(2);
    restarted_.OnWorkersSucceeded(a.conn, ok);
  }
  for (Agent& a : agents_)
    EXPECT_EQ(a.ch->last().kind_case(), Kind::kJobSucceeded);
}

TEST_F(AdoptionTest, AMemberMissingAfterTheGraceFormsTheNextRound) {
  RunOnFirstServer();
  Join(restarted_, agents_[0]);
  Join(restarted_, agents_[1]);
  clock_.Advance(absl::Milliseconds(4900));
  restarted_.Tick();
  EXPECT_EQ(agents_[0].ch->count(Kind::kRoundReady), 0);
  clock_.Advance(absl::Milliseconds(100));
  restarted_.Tick();  // grace over: round 3 with the two that came back
  for (int i : {0, 1}) {
    ASSERT_EQ(agents_[i].ch->last().kind_case(), Kind::kRoundReady);
    EXPECT_EQ(agents_[i].ch->last().round_ready().round(), 3);
    EXPECT_EQ(agents_[i].ch->last().round_ready().store_prefix(), "job/3");
  }
  // Survivors keep their order.
  EXPECT_EQ(agents_[0].ch->last().round_ready().group_rank() <
                agents_[1].ch->last().round_ready().group_rank(),
            agents_[0].ready.group_rank() < agents_[1].ready.group_rank());
}

TEST_F(AdoptionTest, AMemberWhoseWorkersStoppedEndsTheAdoption) {
  RunOnFirstServer();
  Join(restarted_, agents_[0]);
  agents_[1].join.mutable_claim()->set_workers_running(false);
  Join(restarted_, agents_[1]);
  Join(restarted_, agents_[2]);
  for (Agent& a : agents_) {
    ASSERT_EQ(a.ch->last().kind_case(), Kind::kRoundReady);
    EXPECT_EQ(a.ch->last().round_ready().round(), 3);
  }
}

TEST_F(AdoptionTest, ClaimsThatDoNotFitFormTheNextRound) {
  RunOnFirstServer();
  Join(restarted_, agents_[0]);
  // Another node claims agent 0's group rank.
  agents_[1].join.mutable_claim()->mutable_round()->set_group_rank(
      agents_[0].ready.group_rank());
  Join(restarted_, agents_[1]);
  Join(restarted_, agents_[2]);
  for (Agent& a : agents_) {
    ASSERT_EQ(a.ch->last().kind_case(), Kind::kRoundReady);
    EXPECT_EQ(a.ch->last().round_ready().round(), 3);
  }
}

TEST_F(AdoptionTest, AJoinWithoutAClaimStartsAtRoundOne) {
  Agent a(MakeJoin("a")), b(MakeJoin("b"));
  Join(restarted_, a);
  Join(restarted_, b);
  clock_.Advance(absl::Seconds(30));  // last call
  restarted_.Tick();
  ASSERT_EQ(a.ch->last().kind_case(), Kind::kRoundReady);
  EXPECT_EQ(a.ch->last().round_ready().round(), 1);
}

// musterd dies between rounds (found by tests/e2e/chaos_e2e_test.cc): a
// worker failure of round 2 used a second restart and the agents stopped
// their workers, so their claims (round 2, restart count 1, nothing running)
// only carry the round on. The restarted musterd's journal (ResumeJob) had
// round 3 with 2 restarts: the next round goes on from there, not from 0.
TEST_F(AdoptionTest, BetweenRoundsTheJournalKeepsTheRestartCount) {
  RunOnFirstServer();
  v1::WorkersFailed failed;
  failed.set_round(2);
  first_.OnWorkersFailed(agents_[1].conn, failed);
  for (Agent& a : agents_) {
    ASSERT_EQ(a.ch->last().kind_case(), Kind::kRestart);
    a.join.mutable_claim()->set_workers_running(false);
  }
  restarted_.ResumeJob("job", 3, 2);
  for (Agent& a : agents_) Join(restarted_, a);
  for (Agent& a : agents_) {
    ASSERT_EQ(a.ch->last().kind_case(), Kind::kRoundReady);
    EXPECT_EQ(a.ch->last().round_ready().round(), 4);
    EXPECT_EQ(a.ch->last().round_ready().restart_count(), 2)
        << "the restarts used before the restart are not given back";
  }
}

// The journal is written at most every 200 ms: when it lags behind the
// claimed round (restart count 1), the claim's count is the floor.
TEST_F(AdoptionTest, BetweenRoundsALaggingJournalDoesNotLowerTheRestartCount) {
  RunOnFirstServer();
  for (Agent& a : agents_) a.join.mutable_claim()->set_workers_running(false);
  restarted_.ResumeJob("job", 1, 0);
  for (Agent& a : agents_) Join(restarted_, a);
  for (Agent& a : agents_) {
    ASSERT_EQ(a.ch->last().kind_case(), Kind::kRoundReady);
    EXPECT_EQ(a.ch->last().round_ready().round(), 3);
    EXPECT_EQ(a.ch->last().round_ready().restart_count(), 1);
  }
}

}  // namespace
}  // namespace muster::rendezvous
