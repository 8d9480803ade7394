// The straggler watch in the Coordinator (coordinator_stragglers.cc), on fake
// channels and a FakeClock: heartbeats carry the ranks' speed counters; a
// half-speed rank is named in GetStatus; under replace with a spare waiting
// (in place) its node gets Excluded, its stream ends and the round ends for
// the others; report sends nothing; an excluded host's new agent is answered
// with Excluded until the cooldown has passed; a bad policy is refused.
// Exclusion that lasts besides stragglers: a node whose health check failed
// between rounds (Leave.health_check_failed) and a node whose workers failed
// --exclude-after-failures rounds in a row are kept out for the cooldown; a
// node that ran in an earlier round and comes back goes before a fresh spare.
#include <memory>
#include <string>
#include <vector>

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

struct Agent {
  ConnectionId conn = 0;
  std::shared_ptr<FakeChannel> ch;
  v1::Join join;
};

class CoordinatorStragglersTest : public ::testing::Test {
 protected:
  CoordinatorStragglersTest() : coord_(Options(), &clock_) {}

  static CoordinatorOptions Options() {
    CoordinatorOptions o;
    o.default_join_timeout = absl::Seconds(600);
    o.default_last_call_timeout = absl::Seconds(1);
    o.default_heartbeat_timeout = absl::Hours(10);
    return o;
  }

  // A node of job "j" (3 nodes, in place) with the given action.
  v1::Join MakeJoin(const std::string& node, const std::string& action) {
    v1::Join j;
    j.set_job_id("j");
    j.set_node_id(node);
    j.set_hostname("host-" + node);
    j.set_advertised_addr("10.0.0.1");
    j.set_local_world_size(1);
    j.set_min_nodes(3);
    j.set_max_nodes(3);
    j.set_node_rank_hint(-1);
    j.set_master_port(29500);
    j.set_lease_timeout_ms(1000);
    j.set_recovery_in_place(true);
    j.set_straggler_action(action);
    j.set_straggler_window_ms(10'000);
    j.set_exclude_cooldown_ms(60'000);
    return j;
  }
  Agent NewAgent(v1::Join join) {
    Agent a{next_conn_++, std::make_shared<FakeChannel>(), std::move(join)};
    return a;
  }
  Agent Joined(v1::Join join) {
    Agent a = NewAgent(std::move(join));
    absl::Status s = coord_.OnJoin(a.conn, a.join, a.ch);
    EXPECT_TRUE(s.ok()) << s;
    return a;
  }
  // A node of job "j" that restarts its workers: `min`:`max` nodes, 5
  // restarts, no lease.
  v1::Join PlainJoin(const std::string& node, int min, int max,
                     int after_failures = 0) {
    v1::Join j = MakeJoin(node, "");
    j.set_min_nodes(min);
    j.set_max_nodes(max);
    j.set_max_restarts(5);
    j.set_lease_timeout_ms(0);
    j.set_recovery_in_place(false);
    j.set_exclude_after_failures(after_failures);
    return j;
  }
  // The same agent joins again on its stream (after a Restart).
  void Rejoin(const Agent& a) {
    absl::Status s = coord_.OnJoin(a.conn, a.join, a.ch);
    EXPECT_TRUE(s.ok()) << s;
  }
  // Lets last call pass so that an open round with min..max waiting closes.
  void PassLastCall() {
    clock_.Advance(absl::Seconds(2));
    coord_.Tick();
  }
  static int64_t RoundOf(const Agent& a) {
    const v1::ServerMessage& m = a.ch->last();
    return m.has_round_ready() ? m.round_ready().round() : -1;
  }
  void FailWorkers(const Agent& a) {
    v1::WorkersFailed failed;
    failed.set_round(RoundOf(a));
    v1::WorkerFailure* f = failed.add_failures();
    f->set_node_id(a.join.node_id());
    f->set_global_rank(0);
    f->set_exit_code(1);
    coord_.OnWorkersFailed(a.conn, failed);
  }
  // Three nodes in round 1; the rank of agents_[i] is i's group rank.
  void ThreeRunning(const std::string& action) {
    for (const char* n : {"a", "b", "c"}) {
      agents_.push_back(Joined(MakeJoin(n, action)));
    }
    coord_.Tick();
    for (const Agent& a : agents_) {
      ASSERT_EQ(a.ch->last().kind_case(), Kind::kRoundReady)
          << a.ch->last().DebugString();
    }
  }
  int RankOf(const Agent& a) {
    for (const v1::ServerMessage& m : a.ch->messages()) {
      if (m.has_round_ready()) return m.round_ready().rank_offset();
    }
    return -1;
  }
  // `seconds` of heartbeats, one a second, ten collectives a second each;
  // agents_[slow] computes twice as long per collective.
  void Beat(int slow, int seconds) {
    for (int s = 0; s < seconds; ++s) {
      ++t_;
      for (size_t i = 0; i < agents_.size(); ++i) {
        v1::Heartbeat hb;
        hb.set_round(1);
        v1::RankSpeedSample* sample = hb.add_speeds();
        sample->set_rank(RankOf(agents_[i]));
        sample->set_collectives(10 * t_);
        sample->set_compute_us(10 * t_ *
                               (static_cast<int>(i) == slow ? 20'000 : 10'000));
        coord_.OnHeartbeat(agents_[i].conn, hb);
      }
      clock_.Advance(absl::Seconds(1));
      coord_.Tick();
    }
  }
  v1::JobStatus Job() {
    const v1::GetStatusResponse r = coord_.Status("j");
    return r.jobs_size() == 1 ? r.jobs(0) : v1::JobStatus();
  }

  FakeClock clock_;
  Coordinator coord_;
  ConnectionId next_conn_ = 1;
  std::vector<Agent> agents_;
  uint64_t t_ = 0;
};

TEST_F(CoordinatorStragglersTest, ReportNamesTheSlowRankAndSendsNothing) {
  ASSERT_NO_FATAL_FAILURE(ThreeRunning(""));
  Beat(/*slow=*/1, 12);
  const v1::JobStatus job = Job();
  EXPECT_EQ(job.straggler_action(), "report");
  EXPECT_DOUBLE_EQ(job.straggler_threshold(), 0.7);
  ASSERT_EQ(job.stragglers_size(), 1) << job.DebugString();
  EXPECT_EQ(job.stragglers(0).rank(), RankOf(agents_[1]));
  EXPECT_EQ(job.stragglers(0).node_id(), "b");
  EXPECT_NEAR(job.stragglers(0).score(), 0.5, 0.02);
  EXPECT_GT(job.stragglers(0).since(), 0);
  // One-job answers carry every rank's speed.
  EXPECT_EQ(job.speeds_size(), 3);
  for (const Agent& a : agents_) {
    EXPECT_EQ(a.ch->count(Kind::kExcluded), 0);
    EXPECT_FALSE(a.ch->closed().has_value());
  }
  // A listing of every job names stragglers too (without the speeds).
  const v1::GetStatusResponse all = coord_.Status("");
  ASSERT_EQ(all.jobs_size(), 1);
  EXPECT_EQ(all.jobs(0).stragglers_size(), 1);
  EXPECT_EQ(all.jobs(0).speeds_size(), 0);

  // A failure now names the straggler in the job's root cause.
  v1::WorkersFailed failed;
  failed.set_round(1);
  v1::WorkerFailure* f = failed.add_failures();
  f->set_node_id("a");
  f->set_hostname("host-a");
  f->set_global_rank(RankOf(agents_[0]));
  f->set_exit_code(1);
  coord_.OnWorkersFailed(agents_[0].conn, failed);
  ASSERT_EQ(agents_[2].ch->last().kind_case(), Kind::kJobFailed);
  EXPECT_THAT(agents_[2].ch->last().job_failed().root_cause(),
              HasSubstr("was a straggler (speed 0.5"));
}

TEST_F(CoordinatorStragglersTest, ReplaceWaitsForASpareThenExcludesTheNode) {
  ASSERT_NO_FATAL_FAILURE(ThreeRunning("replace"));
  Beat(/*slow=*/1, 12);
  // No spare: reported, not acted on.
  EXPECT_EQ(agents_[1].ch->count(Kind::kExcluded), 0);
  EXPECT_EQ(Job().stragglers_size(), 1);

  Agent spare = Joined(MakeJoin("d", "replace"));
  EXPECT_EQ(spare.ch->last().kind_case(), Kind::kWaiting);
  Beat(/*slow=*/1, 2);
  ASSERT_EQ(agents_[1].ch->count(Kind::kExcluded), 1);
  const v1::ServerMessage excluded = agents_[1].ch->last();
  EXPECT_EQ(excluded.excluded().round(), 1);
  EXPECT_THAT(excluded.excluded().reason(), HasSubstr("straggler, score 0.5"));
  EXPECT_NEAR(excluded.excluded().score(), 0.5, 0.02);
  ASSERT_TRUE(agents_[1].ch->closed().has_value());
  EXPECT_TRUE(agents_[1].ch->closed()->ok());
  // The round ends for the others (they keep their workers in place).
  for (int i : {0, 2}) {
    EXPECT_EQ(agents_[i].ch->last().kind_case(), Kind::kRestart)
        << agents_[i].ch->last().DebugString();
    EXPECT_THAT(agents_[i].ch->last().restart().reason(),
                HasSubstr("excluded: straggler"));
  }
  const v1::JobStatus job = Job();
  ASSERT_EQ(job.excluded_size(), 1) << job.DebugString();
  EXPECT_EQ(job.excluded(0).node_id(), "b");
  EXPECT_EQ(job.excluded(0).hostname(), "host-b");
  EXPECT_EQ(job.excluded(0).until_unix_ms() - job.excluded(0).since_unix_ms(),
            60'000);
}

TEST_F(CoordinatorStragglersTest, AnExcludedHostIsRefusedUntilTheCooldownEnds) {
  ASSERT_NO_FATAL_FAILURE(ThreeRunning("exclude"));
  // exclude without a spare: only while the job keeps its minimum (3 of 3
  // cannot lose one).
  Beat(/*slow=*/2, 12);
  EXPECT_EQ(agents_[2].ch->count(Kind::kExcluded), 0);
  Agent spare = Joined(MakeJoin("d", "exclude"));
  Beat(/*slow=*/2, 2);
  ASSERT_EQ(agents_[2].ch->count(Kind::kExcluded), 1);

  // A new agent (new node id) on the excluded host: Excluded, stream closed.
  v1::Join again = MakeJoin("c2", "exclude");
  again.set_hostname("host-c");
  Agent back = NewAgent(again);
  ASSERT_TRUE(coord_.OnJoin(back.conn, back.join, back.ch).ok());
  ASSERT_EQ(back.ch->count(Kind::kExcluded), 1);
  EXPECT_THAT(back.ch->last().excluded().reason(),
              HasSubstr("--exclude-cooldown"));
  ASSERT_TRUE(back.ch->closed().has_value());

  // After the cooldown it may join again.
  clock_.Advance(absl::Seconds(61));
  coord_.Tick();
  Agent later = NewAgent(again);
  ASSERT_TRUE(coord_.OnJoin(later.conn, later.join, later.ch).ok());
  EXPECT_EQ(later.ch->count(Kind::kExcluded), 0);
  EXPECT_FALSE(later.ch->closed().has_value());
  EXPECT_EQ(Job().excluded_size(), 0);
}

TEST_F(CoordinatorStragglersTest, ABadPolicyIsRefusedWithTheFlagToFix) {
  v1::Join bad = MakeJoin("a", "banana");
  Agent a = NewAgent(bad);
  absl::Status s = coord_.OnJoin(a.conn, a.join, a.ch);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("--straggler-action"));
  v1::Join threshold = MakeJoin("a", "report");
  threshold.set_straggler_threshold(1.5);
  Agent b = NewAgent(threshold);
  s = coord_.OnJoin(b.conn, b.join, b.ch);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("--straggler-threshold"));
}

TEST_F(CoordinatorStragglersTest, AFailedHealthCheckExcludesTheNode) {
  Agent a = Joined(PlainJoin("a", 2, 3));
  Agent b = Joined(PlainJoin("b", 2, 3));
  Agent c = Joined(PlainJoin("c", 2, 3));
  coord_.Tick();
  ASSERT_EQ(RoundOf(c), 1) << c.ch->last().DebugString();
  FailWorkers(a);
  // c's check fails before its rejoin: it leaves saying so.
  v1::Leave leave;
  leave.set_reason("health check failed (exit code 5): GPU 0 fell off the bus");
  leave.set_health_check_failed(true);
  coord_.OnLeave(c.conn, leave);
  Rejoin(a);
  Rejoin(b);
  PassLastCall();
  EXPECT_EQ(RoundOf(a), 2) << a.ch->last().DebugString();
  EXPECT_EQ(a.ch->last().round_ready().group_world_size(), 2);

  v1::JobStatus job = Job();
  ASSERT_EQ(job.excluded_size(), 1) << job.DebugString();
  EXPECT_EQ(job.excluded(0).node_id(), "c");
  EXPECT_THAT(job.excluded(0).reason(), HasSubstr("GPU 0 fell off the bus"));

  // Its agent restarted (a new node id on the same host) passes its check
  // now, but is refused until the cooldown has passed.
  v1::Join again = PlainJoin("c2", 2, 3);
  again.set_hostname("host-c");
  Agent back = Joined(again);
  ASSERT_EQ(back.ch->count(Kind::kExcluded), 1);
  EXPECT_THAT(back.ch->last().excluded().reason(),
              HasSubstr("GPU 0 fell off the bus"));
  EXPECT_TRUE(back.ch->closed().has_value());
  clock_.Advance(absl::Seconds(61));
  coord_.Tick();
  Agent later = Joined(again);
  EXPECT_EQ(later.ch->count(Kind::kExcluded), 0);
  EXPECT_FALSE(later.ch->closed().has_value());
}

TEST_F(CoordinatorStragglersTest, APlainLeaveExcludesNothing) {
  Agent a = Joined(PlainJoin("a", 1, 2));
  Agent b = Joined(PlainJoin("b", 1, 2));
  coord_.Tick();
  v1::Leave leave;
  leave.set_reason("interrupted");
  coord_.OnLeave(b.conn, leave);
  EXPECT_EQ(Job().excluded_size(), 0) << Job().DebugString();
  Agent back = Joined(PlainJoin("b", 1, 2));
  EXPECT_EQ(back.ch->count(Kind::kExcluded), 0);
}

TEST_F(CoordinatorStragglersTest, ANodeFailingRoundsInARowIsExcluded) {
  Agent a = Joined(PlainJoin("a", 2, 3, /*after_failures=*/2));
  Agent b = Joined(PlainJoin("b", 2, 3, 2));
  Agent c = Joined(PlainJoin("c", 2, 3, 2));
  coord_.Tick();
  ASSERT_EQ(RoundOf(b), 1);
  // b fails round 1, a fails round 2 (b's streak starts over), b fails
  // rounds 3 and 4: excluded after the fourth.
  const char* failing[] = {"b", "a", "b"};
  for (int r = 0; r < 3; ++r) {
    Agent& who = failing[r][0] == 'a' ? a : b;
    FailWorkers(who);
    EXPECT_EQ(b.ch->count(Kind::kExcluded), 0) << "round " << r + 1;
    for (Agent* x : {&a, &b, &c}) Rejoin(*x);
    ASSERT_EQ(RoundOf(a), r + 2) << a.ch->last().DebugString();
  }
  FailWorkers(b);
  ASSERT_EQ(b.ch->count(Kind::kExcluded), 1);
  EXPECT_THAT(b.ch->last().excluded().reason(),
              HasSubstr("failed 2 rounds in a row"));
  EXPECT_TRUE(b.ch->closed().has_value());
  // The others form the next round without it (the failure cost a restart).
  Rejoin(a);
  Rejoin(c);
  PassLastCall();
  EXPECT_EQ(a.ch->last().round_ready().group_world_size(), 2)
      << a.ch->last().DebugString();
  v1::JobStatus job = Job();
  EXPECT_EQ(job.restart_count(), 4);
  ASSERT_EQ(job.excluded_size(), 1);
  EXPECT_EQ(job.excluded(0).node_id(), "b");
}

TEST_F(CoordinatorStragglersTest, NoExclusionThatWouldBreakTheMinimum) {
  Agent a = Joined(PlainJoin("a", 2, 2, /*after_failures=*/1));
  Agent b = Joined(PlainJoin("b", 2, 2, 1));
  coord_.Tick();
  ASSERT_EQ(RoundOf(b), 1);
  FailWorkers(b);
  // 2 of min 2, no spare: b stays, the job restarts with both.
  EXPECT_EQ(b.ch->count(Kind::kExcluded), 0);
  Rejoin(a);
  Rejoin(b);
  EXPECT_EQ(RoundOf(b), 2) << b.ch->last().DebugString();
  EXPECT_EQ(Job().excluded_size(), 0);
}

TEST_F(CoordinatorStragglersTest, AReturningNodeGoesBeforeAFreshSpare) {
  Agent a = Joined(PlainJoin("a", 1, 2));
  Agent b = Joined(PlainJoin("b", 1, 2));
  ASSERT_EQ(RoundOf(a), 1);
  // b is lost; c takes its place in round 2.
  coord_.OnDisconnect(b.conn);
  Agent c = Joined(PlainJoin("c", 1, 2));
  Rejoin(a);
  ASSERT_EQ(RoundOf(c), 2) << c.ch->last().DebugString();
  // While round 2 runs at max, two fresh spares wait, then b's host comes
  // back with a new agent.
  Agent s = Joined(PlainJoin("s", 1, 2));
  Agent t = Joined(PlainJoin("t", 1, 2));
  EXPECT_EQ(t.ch->last().kind_case(), Kind::kWaiting);
  v1::Join back_join = PlainJoin("b2", 1, 2);
  back_join.set_hostname("host-b");
  Agent back = Joined(back_join);
  EXPECT_EQ(back.ch->last().kind_case(), Kind::kWaiting);
  // c is lost: three spares wait for the two places (at max the round closes
  // at once, before the survivor a is back): the returning host first, then
  // the spares by arrival.
  coord_.OnDisconnect(c.conn);
  EXPECT_EQ(RoundOf(back), 3) << back.ch->last().DebugString();
  EXPECT_EQ(RoundOf(s), 3) << s.ch->last().DebugString();
  EXPECT_EQ(t.ch->last().kind_case(), Kind::kWaiting)
      << t.ch->last().DebugString();
}

}  // namespace
}  // namespace muster::rendezvous
