// The Coordinator's transitions, one test (or more) each, driven through fake
// channels and a FakeClock: every message an agent would get and every stream
// close is recorded and asserted.
#include "muster/rendezvous/coordinator.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/common/logging.h"
#include "muster/platform/clock.h"
#include "tests/testing/fake_channel.h"

namespace muster::rendezvous {
namespace {

using ::muster::testing::FakeChannel;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Kind = FakeChannel::Kind;

struct Agent {
  ConnectionId conn = 0;
  std::shared_ptr<FakeChannel> ch;
  v1::Join join;
};

class CoordinatorTest : public ::testing::Test {
 protected:
  CoordinatorTest() : coord_(Options(), &clock_) {}

  void TearDown() override {
    for (const auto& ch : all_channels_) {
      EXPECT_EQ(ch->sends_after_close(), 0)
          << "a message was sent on a closed stream";
      EXPECT_LE(ch->close_calls(), 1) << "a stream was closed twice";
    }
  }

  CoordinatorOptions Options() {
    CoordinatorOptions o;
    o.default_join_timeout = absl::Seconds(600);
    o.default_last_call_timeout = absl::Seconds(30);
    // Long, so heartbeat deadlines stay out of the way except where a test sets
    // its own.
    o.default_heartbeat_timeout = absl::Hours(10);
    o.finished_job_retention = absl::Minutes(10);
    o.on_round_end = [this](const std::string& prefix) {
      ended_.push_back(prefix);
    };
    return o;
  }

  static v1::Join MakeJoin(const std::string& job, const std::string& node,
                           int min_nodes, int max_nodes,
                           int local_world_size = 1, int max_restarts = 0) {
    v1::Join j;
    j.set_job_id(job);
    j.set_node_id(node);
    j.set_hostname("host-" + node);
    j.set_advertised_addr("10.0.0." + node);
    j.set_local_world_size(local_world_size);
    j.set_min_nodes(min_nodes);
    j.set_max_nodes(max_nodes);
    j.set_node_rank_hint(-1);
    j.set_max_restarts(max_restarts);
    j.set_master_port(29500 + static_cast<int>(node.size()) + node[0]);
    // The shortest lease: heartbeat timeouts of these tests (>= 1 s) decide
    // when a silent node is lost (lease_test.cc covers longer leases).
    j.set_lease_timeout_ms(1000);
    return j;
  }

  // A new agent on a new stream; does not join yet.
  Agent NewAgent(v1::Join join) {
    Agent a;
    a.conn = next_conn_++;
    a.ch = std::make_shared<FakeChannel>();
    all_channels_.push_back(a.ch);
    a.join = std::move(join);
    return a;
  }
  absl::Status Join(const Agent& a) {
    return coord_.OnJoin(a.conn, a.join, a.ch);
  }
  // A new agent that joins; the Join must be accepted.
  Agent Joined(v1::Join join) {
    Agent a = NewAgent(std::move(join));
    absl::Status s = Join(a);
    EXPECT_TRUE(s.ok()) << s;
    return a;
  }
  // Agents a and b of job "j" (2 to 3 nodes) in round 1, which closes at min
  // once the default last call (30 s) has passed. Callers wrap it in
  // ASSERT_NO_FATAL_FAILURE.
  void TwoInRoundOne(Agent* a, Agent* b, int max_restarts = 0) {
    *a = Joined(MakeJoin("j", "a", 2, 3, 1, max_restarts));
    *b = Joined(MakeJoin("j", "b", 2, 3, 1, max_restarts));
    clock_.Advance(absl::Seconds(30));
    coord_.Tick();
    ASSERT_EQ(b->ch->last().kind_case(), Kind::kRoundReady)
        << b->ch->last().DebugString();
  }
  // The same node on a new stream (a reconnect).
  Agent Reconnect(const Agent& a) {
    Agent b = NewAgent(a.join);
    absl::Status s = Join(b);
    EXPECT_TRUE(s.ok()) << s;
    return b;
  }

  void Fail(const Agent& a, int64_t round, v1::WorkerFailure f) {
    v1::WorkersFailed msg;
    msg.set_round(round);
    *msg.add_failures() = std::move(f);
    coord_.OnWorkersFailed(a.conn, msg);
  }
  void Succeed(const Agent& a, int64_t round) {
    v1::WorkersSucceeded msg;
    msg.set_round(round);
    coord_.OnWorkersSucceeded(a.conn, msg);
  }

  static v1::WorkerFailure Failure(const std::string& node, int global_rank,
                                   int local_rank, int exit_code,
                                   int signal = 0, std::string message = "",
                                   int64_t ts_ms = 0) {
    v1::WorkerFailure f;
    f.set_node_id(node);
    f.set_hostname("host-" + node);
    f.set_global_rank(global_rank);
    f.set_local_rank(local_rank);
    f.set_exit_code(exit_code);
    f.set_signal(signal);
    f.set_error_message(std::move(message));
    f.set_timestamp_unix_ms(ts_ms);
    f.set_pid(4242);
    return f;
  }

  v1::JobStatus JobStatusOf(const std::string& job) {
    v1::GetStatusResponse r = coord_.Status(job);
    EXPECT_EQ(r.jobs_size(), 1);
    return r.jobs_size() == 1 ? r.jobs(0) : v1::JobStatus();
  }
  std::string StateOf(const std::string& job) {
    return JobStatusOf(job).state();
  }

  FakeClock clock_;
  std::vector<std::string> ended_;
  std::vector<std::shared_ptr<FakeChannel>> all_channels_;
  ConnectionId next_conn_ = 1;
  Coordinator coord_;
};

// Fatal: the checks that follow read the RoundReady.
#define ASSERT_ROUND_READY(msg) \
  ASSERT_EQ((msg).kind_case(), Kind::kRoundReady) << (msg).DebugString()

// ---------- forming rounds

TEST_F(CoordinatorTest, FixedSizeRoundFormsAtMaxWithHeterogeneousRanks) {
  const absl::Time start = clock_.Now();
  Agent a = Joined(
      MakeJoin("j", "a", 2, 2, /*local_world_size=*/2, /*max_restarts=*/3));
  ASSERT_EQ(a.ch->size(), 1u);
  const v1::Waiting w = a.ch->last().waiting();
  EXPECT_EQ(a.ch->last().kind_case(), Kind::kWaiting);
  EXPECT_EQ(w.round(), 1);
  EXPECT_EQ(w.joined(), 1);
  EXPECT_EQ(w.min_nodes(), 2);
  EXPECT_EQ(w.max_nodes(), 2);
  EXPECT_EQ(w.deadline_unix_ms(),
            absl::ToUnixMillis(start + absl::Seconds(600)));
  EXPECT_EQ(StateOf("j"), "OPEN");

  Agent b = Joined(
      MakeJoin("j", "b", 2, 2, /*local_world_size=*/3, /*max_restarts=*/3));
  // At max the round closes at once: no second Waiting, straight to RoundReady.
  ASSERT_EQ(a.ch->size(), 2u);
  ASSERT_EQ(b.ch->size(), 1u);
  ASSERT_ROUND_READY(a.ch->last());
  ASSERT_ROUND_READY(b.ch->last());
  const v1::RoundReady ra = a.ch->last().round_ready();
  const v1::RoundReady rb = b.ch->last().round_ready();
  EXPECT_EQ(ra.round(), 1);
  EXPECT_EQ(ra.group_rank(), 0);
  EXPECT_EQ(rb.group_rank(), 1);
  EXPECT_EQ(ra.group_world_size(), 2);
  EXPECT_EQ(ra.rank_offset(), 0);
  EXPECT_EQ(rb.rank_offset(), 2);
  EXPECT_EQ(ra.world_size(), 5);
  EXPECT_EQ(rb.world_size(), 5);
  EXPECT_EQ(ra.master_addr(), "10.0.0.a");
  EXPECT_EQ(rb.master_addr(), "10.0.0.a");
  EXPECT_EQ(rb.master_port(), a.join.master_port());
  EXPECT_EQ(ra.store_prefix(), "j/1");
  EXPECT_EQ(ra.restart_count(), 0);
  EXPECT_EQ(ra.max_restarts(), 3);
  ASSERT_EQ(rb.peers_size(), 2);
  EXPECT_EQ(rb.peers(0).node_id(), "a");
  EXPECT_EQ(rb.peers(0).hostname(), "host-a");
  EXPECT_EQ(rb.peers(1).node_id(), "b");
  EXPECT_EQ(rb.peers(1).rank_offset(), 2);
  EXPECT_EQ(rb.peers(1).local_world_size(), 3);

  v1::JobStatus s = JobStatusOf("j");
  EXPECT_EQ(s.state(), "RUNNING");
  EXPECT_EQ(s.round(), 1);
  EXPECT_EQ(s.members_size(), 2);
  EXPECT_EQ(s.waiting_size(), 0);
  EXPECT_EQ(coord_.ConnectedAgents(), 2);
  EXPECT_EQ(coord_.JobCount(), 1);
  EXPECT_TRUE(ended_.empty());
}

TEST_F(CoordinatorTest, ElasticRoundClosesWhenLastCallFires) {
  v1::Join ja = MakeJoin("j", "a", 2, 3);
  ja.set_last_call_timeout_ms(5000);
  Agent a = Joined(ja);
  Agent b = Joined(MakeJoin("j", "b", 2, 3));
  // Every waiting agent hears the count change.
  EXPECT_EQ(a.ch->last().waiting().joined(), 2);
  EXPECT_EQ(b.ch->last().waiting().joined(), 2);
  EXPECT_EQ(a.ch->count(Kind::kWaiting), 2);
  EXPECT_EQ(coord_.Tick(),
            clock_.Now() + absl::Seconds(5));  // the last call, from the Join

  clock_.Advance(absl::Seconds(4));
  coord_.Tick();
  EXPECT_EQ(StateOf("j"), "OPEN");
  clock_.Advance(absl::Seconds(1));
  coord_.Tick();
  ASSERT_ROUND_READY(a.ch->last());
  ASSERT_ROUND_READY(b.ch->last());
  EXPECT_EQ(a.ch->last().round_ready().group_world_size(), 2);
  EXPECT_EQ(b.ch->last().round_ready().group_rank(), 1);
  EXPECT_EQ(StateOf("j"), "RUNNING");
}

TEST_F(CoordinatorTest, LastCallUsesDefaultAndMaxClosesEarly) {
  Agent a = Joined(MakeJoin("j", "a", 2, 3));
  Agent b = Joined(MakeJoin("j", "b", 2, 3));
  EXPECT_EQ(coord_.Tick(),
            clock_.Now() + absl::Seconds(30));  // options' default
  clock_.Advance(absl::Seconds(10));
  Agent c = Joined(
      MakeJoin("j", "c", 2, 3));  // max reached: no need to wait for the timer
  ASSERT_ROUND_READY(c.ch->last());
  EXPECT_EQ(c.ch->last().round_ready().group_rank(), 2);
  EXPECT_EQ(a.ch->last().round_ready().group_world_size(), 3);
  EXPECT_EQ(StateOf("j"), "RUNNING");
}

TEST_F(CoordinatorTest, LostWhileOpenLeavesTheWaitingSetAndDisarmsLastCall) {
  Agent a = Joined(MakeJoin("j", "a", 2, 3));
  Agent b = Joined(MakeJoin("j", "b", 2, 3));
  EXPECT_EQ(a.ch->last().waiting().joined(), 2);
  coord_.OnDisconnect(b.conn);
  EXPECT_EQ(a.ch->last().kind_case(), Kind::kWaiting);
  EXPECT_EQ(a.ch->last().waiting().joined(), 1);
  EXPECT_EQ(coord_.ConnectedAgents(), 1);
  // Below min again, the last call is off: its time passes and nothing forms.
  clock_.Advance(absl::Seconds(31));
  coord_.Tick();
  EXPECT_EQ(StateOf("j"), "OPEN");
  EXPECT_EQ(a.ch->last().kind_case(), Kind::kWaiting);
  v1::JobStatus s = JobStatusOf("j");
  ASSERT_EQ(s.waiting_size(), 1);
  EXPECT_EQ(s.waiting(0).node_id(), "a");
  EXPECT_EQ(s.waiting(0).group_rank(), -1);
}

TEST_F(CoordinatorTest, JoinTimeoutFailsNamingWhoJoinedAndWhoWasLost) {
  Agent a = Joined(MakeJoin("j", "a", 2, 3));
  Agent x = Joined(MakeJoin("j", "x", 2, 3));
  coord_.OnDisconnect(x.conn);
  EXPECT_EQ(coord_.Tick(), clock_.Now() + absl::Seconds(600));
  clock_.Advance(absl::Seconds(599));
  coord_.Tick();
  EXPECT_EQ(StateOf("j"), "OPEN");
  clock_.Advance(absl::Seconds(1));
  coord_.Tick();

  ASSERT_EQ(a.ch->last().kind_case(), Kind::kJobFailed);
  const std::string cause = a.ch->last().job_failed().root_cause();
  EXPECT_THAT(
      cause,
      HasSubstr("only 1 of the 2 nodes needed (--nnodes=2:3) joined round 1 "
                "within join_timeout 600s"));
  EXPECT_THAT(cause, HasSubstr("joined: node host-a [a]"));
  EXPECT_THAT(cause, HasSubstr("lost: node host-x [x]: stream closed"));
  EXPECT_FALSE(a.ch->last().job_failed().has_first_failure());
  ASSERT_TRUE(a.ch->closed().has_value());
  EXPECT_TRUE(a.ch->closed()->ok());
  v1::JobStatus s = JobStatusOf("j");
  EXPECT_EQ(s.state(), "FAILED");
  EXPECT_EQ(s.last_failure(), cause);
  EXPECT_TRUE(ended_.empty()) << "no round ran, so no store namespace to drop";
}

TEST_F(CoordinatorTest, JoinTimeoutClosesARoundThatHasMin) {
  // A last call longer than join_timeout: join_timeout still bounds the open
  // phase.
  v1::Join ja = MakeJoin("j", "a", 1, 2);
  ja.set_join_timeout_ms(10'000);
  ja.set_last_call_timeout_ms(60'000);
  Agent a = Joined(ja);
  EXPECT_EQ(coord_.Tick(), clock_.Now() + absl::Seconds(10));
  clock_.Advance(absl::Seconds(10));
  coord_.Tick();
  ASSERT_ROUND_READY(a.ch->last());
  EXPECT_EQ(a.ch->last().round_ready().world_size(), 1);
}

// ---------- refused joins

TEST_F(CoordinatorTest, MismatchedJobSizesAreRefusedNamingBothValuesAndTheFix) {
  Agent a = Joined(MakeJoin("j", "a", 2, 2));
  Agent b = NewAgent(MakeJoin("j", "b", 2, 3));
  absl::Status s = Join(b);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("job j"));
  EXPECT_THAT(s.message(), HasSubstr("--nnodes=2:3"));
  EXPECT_THAT(s.message(), HasSubstr("--nnodes=2 "));
  EXPECT_THAT(
      s.message(),
      HasSubstr("give every node the same --nnodes and --max-restarts, or "
                "use another --rdzv-id"));

  Agent c = NewAgent(MakeJoin("j", "c", 2, 2, 1, /*max_restarts=*/5));
  s = Join(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("--max-restarts=5"));
  EXPECT_THAT(s.message(), HasSubstr("--max-restarts=0"));

  // The refused agents left no trace: a still waits alone.
  EXPECT_EQ(coord_.ConnectedAgents(), 1);
  EXPECT_EQ(a.ch->size(), 1u);
  EXPECT_EQ(b.ch->size(), 0u);
  EXPECT_EQ(JobStatusOf("j").waiting_size(), 1);
}

TEST_F(CoordinatorTest, MalformedJoinsAreRefusedNamingTheField) {
  struct Case {
    std::function<void(v1::Join&)> mutate;
    std::string field;
  };
  std::vector<Case> cases = {
      {[](v1::Join& j) { j.set_job_id(""); }, "job_id"},
      {[](v1::Join& j) { j.set_node_id(""); }, "node_id"},
      {[](v1::Join& j) { j.set_local_world_size(0); }, "local_world_size"},
      {[](v1::Join& j) { j.set_min_nodes(0); }, "min_nodes"},
      {[](v1::Join& j) { j.set_max_nodes(1); }, "max_nodes"},  // min is 2
      {[](v1::Join& j) { j.set_max_restarts(-1); }, "max_restarts"},
      {[](v1::Join& j) { j.set_node_rank_hint(-3); }, "node_rank_hint"},
      {[](v1::Join& j) { j.set_heartbeat_timeout_ms(-1); }, "timeouts"},
      // Issue 11: the id grammar, and sizes summed in 64 bits.
      {[](v1::Join& j) { j.set_job_id("a/b"); }, "job_id 'a/b'"},
      {[](v1::Join& j) { j.set_job_id(std::string(1 << 20, 'x')); },
       "(1048576 bytes) is not a valid id: expected 1 to 128 characters"},
      {[](v1::Join& j) { j.set_node_id("n\n1"); }, "node_id 'n\\n1'"},
      {[](v1::Join& j) { j.set_local_world_size(2147483647); },
       "--nproc-per-node must be from 1 to 4096"},
      {[](v1::Join& j) {
         j.set_local_world_size(4096);
         j.set_max_nodes(2048);
       },
       "above the limit of 4194304"},
  };
  for (const Case& c : cases) {
    v1::Join j = MakeJoin("j", "a", 2, 3);
    c.mutate(j);
    Agent a = NewAgent(j);
    absl::Status s = Join(a);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(s.message(), HasSubstr(c.field));
    EXPECT_EQ(a.ch->size(), 0u);
  }
  EXPECT_EQ(coord_.ConnectedAgents(), 0);
  EXPECT_EQ(coord_.JobCount(), 0);
}

TEST_F(CoordinatorTest, ASessionServesOneNodeOfOneJob) {
  Agent a = Joined(MakeJoin("j", "a", 2, 2));
  v1::Join other = MakeJoin("k", "a", 1, 1);
  EXPECT_EQ(coord_.OnJoin(a.conn, other, a.ch).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(coord_.JobCount(), 1);
}

// ---------- worker failures

TEST_F(CoordinatorTest, WorkerFailureWithRestartsLeftRestartsEveryone) {
  Agent a = Joined(MakeJoin("j", "a", 2, 2, 1, /*max_restarts=*/3));
  Agent b = Joined(MakeJoin("j", "b", 2, 2, 1, 3));
  Fail(b, 1, Failure("b", 1, 0, 7, 0, "ValueError: bad batch"));

  for (const Agent* x : {&a, &b}) {
    ASSERT_EQ(x->ch->last().kind_case(), Kind::kRestart);
    const v1::Restart r = x->ch->last().restart();
    EXPECT_EQ(r.round(), 1);
    EXPECT_EQ(r.restart_count(), 1);
    EXPECT_THAT(
        r.reason(),
        HasSubstr("worker rank 1 (local rank 0) on node host-b [b] exited "
                  "with code 7: ValueError: bad batch"));
    EXPECT_FALSE(x->ch->closed().has_value());
  }
  EXPECT_THAT(ended_, ElementsAre("j/1"));
  v1::JobStatus s = JobStatusOf("j");
  EXPECT_EQ(s.state(), "OPEN");
  EXPECT_EQ(s.round(), 2);
  EXPECT_EQ(s.restart_count(), 1);
  EXPECT_EQ(s.members_size(), 0);
  EXPECT_THAT(s.last_failure(), HasSubstr("exited with code 7"));

  // b rejoins first, yet the survivors keep their order.
  ASSERT_TRUE(Join(b).ok());
  EXPECT_EQ(b.ch->last().waiting().round(), 2);
  ASSERT_TRUE(Join(a).ok());
  ASSERT_ROUND_READY(a.ch->last());
  const v1::RoundReady ra = a.ch->last().round_ready();
  const v1::RoundReady rb = b.ch->last().round_ready();
  EXPECT_EQ(ra.round(), 2);
  EXPECT_EQ(ra.group_rank(), 0);
  EXPECT_EQ(rb.group_rank(), 1);
  EXPECT_EQ(ra.store_prefix(), "j/2");
  EXPECT_EQ(ra.restart_count(), 1);
  EXPECT_EQ(rb.restart_count(), 1);
}

// The timeline of one job (the console's job page): each round made ready,
// when, and what ended it; a listing of every job leaves it out.
TEST_F(CoordinatorTest, HistoryRecordsEachRoundAndWhatEndedIt) {
  Agent a = Joined(MakeJoin("j", "a", 2, 2, 1, /*max_restarts=*/3));
  Agent b = Joined(MakeJoin("j", "b", 2, 2, 1, 3));
  const int64_t t1 = absl::ToUnixMillis(clock_.Now());
  clock_.Advance(absl::Seconds(5));
  Fail(b, 1, Failure("b", 1, 0, 7, 0, "ValueError: bad batch"));
  ASSERT_TRUE(Join(b).ok());
  ASSERT_TRUE(Join(a).ok());
  ASSERT_ROUND_READY(a.ch->last());
  clock_.Advance(absl::Seconds(2));
  Succeed(a, 2);
  Succeed(b, 2);

  const v1::JobStatus s = JobStatusOf("j");
  ASSERT_EQ(s.history_size(), 2) << s.DebugString();
  const v1::RoundRecord& r1 = s.history(0);
  EXPECT_EQ(r1.round(), 1);
  EXPECT_EQ(r1.ready_unix_ms(), t1);
  EXPECT_EQ(r1.ended_unix_ms(), t1 + 5000);
  EXPECT_EQ(r1.ended_by(), "worker failure");
  EXPECT_THAT(r1.reason(), HasSubstr("exited with code 7: ValueError"));
  EXPECT_EQ(r1.nodes(), 2);
  EXPECT_EQ(r1.world_size(), 2);
  const v1::RoundRecord& r2 = s.history(1);
  EXPECT_EQ(r2.round(), 2);
  EXPECT_EQ(r2.ended_by(), "succeeded");
  EXPECT_EQ(r2.ended_unix_ms(), t1 + 7000);
  EXPECT_EQ(s.first_failure().global_rank(), 1);
  EXPECT_EQ(s.first_failure().error_message(), "ValueError: bad batch");
  EXPECT_EQ(coord_.Status("").jobs(0).history_size(), 0);
  EXPECT_FALSE(coord_.Status("").jobs(0).has_first_failure());
}

// Issue 11: a round that lost a member re-forms as soon as every survivor is
// back, without waiting last_call_timeout (30 s by default) for newcomers.
TEST_F(CoordinatorTest, ALostMembersSurvivorsReformAtOnceWithoutLastCall) {
  Agent a = Joined(MakeJoin("j", "a", 2, 3));
  Agent b = Joined(MakeJoin("j", "b", 2, 3));
  Agent c = Joined(MakeJoin("j", "c", 2, 3));
  ASSERT_ROUND_READY(c.ch->last());
  coord_.OnDisconnect(b.conn);  // kill -9 of b's agent
  ASSERT_EQ(a.ch->last().kind_case(), Kind::kRestart);
  ASSERT_EQ(c.ch->last().kind_case(), Kind::kRestart);

  ASSERT_TRUE(Join(c).ok());
  EXPECT_EQ(c.ch->last().kind_case(), Kind::kWaiting) << "a is not back yet";
  ASSERT_TRUE(Join(a).ok());  // the last survivor: no clock advanced
  ASSERT_ROUND_READY(a.ch->last());
  ASSERT_ROUND_READY(c.ch->last());
  EXPECT_EQ(a.ch->last().round_ready().round(), 2);
  EXPECT_EQ(a.ch->last().round_ready().world_size(), 2);
  EXPECT_EQ(a.ch->last().round_ready().group_rank(), 0);
  EXPECT_EQ(c.ch->last().round_ready().group_rank(), 1);
  EXPECT_EQ(JobStatusOf("j").restart_count(), 0);
}

TEST_F(CoordinatorTest, AWorkerFailureBelowMaxReformsAtOnceToo) {
  Agent a, b;
  ASSERT_NO_FATAL_FAILURE(TwoInRoundOne(&a, &b, /*max_restarts=*/1));
  Fail(a, 1, Failure("a", 0, 0, 1, 0, "boom"));
  ASSERT_TRUE(Join(b).ok());
  ASSERT_TRUE(Join(a).ok());
  ASSERT_ROUND_READY(a.ch->last());
  EXPECT_EQ(a.ch->last().round_ready().round(), 2);
  EXPECT_EQ(a.ch->last().round_ready().restart_count(), 1);
}

TEST_F(CoordinatorTest, ASurvivorThatNeverRejoinsLeavesTheRoundToLastCall) {
  Agent a = Joined(MakeJoin("j", "a", 1, 3));
  Agent b = Joined(MakeJoin("j", "b", 1, 3));
  Agent c = Joined(MakeJoin("j", "c", 1, 3));
  ASSERT_ROUND_READY(a.ch->last());
  coord_.OnDisconnect(c.conn);
  ASSERT_TRUE(Join(a).ok());  // b stays silent (hung, or slow to stop)
  EXPECT_EQ(a.ch->last().kind_case(), Kind::kWaiting);
  clock_.Advance(absl::Seconds(29));
  coord_.Tick();
  EXPECT_EQ(a.ch->last().kind_case(), Kind::kWaiting);
  clock_.Advance(absl::Seconds(1));
  coord_.Tick();
  ASSERT_ROUND_READY(a.ch->last());
  EXPECT_EQ(a.ch->last().round_ready().world_size(), 1);
}

// Issue 11: jobs whose only agent joined and left do not pile up.
TEST_F(CoordinatorTest, AnOpenJobWithNoAgentLeftIsForgottenAtOnce) {
  for (int i = 0; i < 500; ++i) {
    Agent a = Joined(MakeJoin(absl::StrCat("abandoned-", i), "a", 2, 2));
    coord_.OnDisconnect(a.conn);
  }
  EXPECT_EQ(coord_.Status("").jobs_size(), 0) << "listed before the Tick";
  coord_.Tick();
  EXPECT_EQ(coord_.JobCount(), 0);
  // A job whose agent left can be joined again, even with other sizes.
  Agent b = Joined(MakeJoin("abandoned-7", "b", 1, 1));
  ASSERT_ROUND_READY(b.ch->last());
}

TEST_F(CoordinatorTest, AtMostMaxFinishedJobsAreKept) {
  CoordinatorOptions o = Options();
  o.max_finished_jobs = 3;
  Coordinator coord(o, &clock_);
  for (int i = 0; i < 5; ++i) {
    auto ch = std::make_shared<FakeChannel>();
    const ConnectionId conn = 1000 + i;
    ASSERT_TRUE(
        coord.OnJoin(conn, MakeJoin(absl::StrCat("done-", i), "a", 1, 1), ch)
            .ok());
    v1::WorkersSucceeded ok;
    ok.set_round(1);
    coord.OnWorkersSucceeded(conn, ok);
    coord.OnDisconnect(conn);
    clock_.Advance(absl::Seconds(1));
    coord.Tick();
  }
  EXPECT_EQ(coord.JobCount(), 3);
  v1::GetStatusResponse s = coord.Status("");
  ASSERT_EQ(s.jobs_size(), 3);
  EXPECT_EQ(s.jobs(0).job_id(), "done-2") << "the oldest went first";
}

TEST_F(CoordinatorTest,
       WorkerFailureWithoutRestartsFailsTheJobWithTheRootCause) {
  const int64_t ts = absl::ToUnixMillis(
      absl::FromUnixSeconds(1795255200));  // 2026-11-21T10:00Z
  Agent a = Joined(MakeJoin("j", "a", 2, 2, 2));
  Agent b = Joined(MakeJoin("j", "b", 2, 2, 2));
  v1::WorkersFailed msg;
  msg.set_round(1);
  // Two failures; the earlier one is the root cause even though it is listed
  // second.
  *msg.add_failures() = Failure("b", 2, 0, -1, 15, "", ts + 500);
  *msg.add_failures() =
      Failure("b", 3, 1, 7, 0, "ValueError: bad batch\nTraceback...", ts);
  coord_.OnWorkersFailed(b.conn, msg);

  const std::string want =
      "worker rank 3 (local rank 1) on node host-b [b] exited with code 7 at "
      "2026-11-21T10:00:00Z: ValueError: bad batch";
  for (const Agent* x : {&a, &b}) {
    ASSERT_EQ(x->ch->last().kind_case(), Kind::kJobFailed)
        << x->ch->last().DebugString();
    const v1::JobFailed f = x->ch->last().job_failed();
    EXPECT_EQ(f.root_cause(), want);
    EXPECT_EQ(f.first_failure().global_rank(), 3);
    EXPECT_EQ(f.first_failure().exit_code(), 7);
    EXPECT_EQ(f.failures_size(), 2);
    ASSERT_TRUE(x->ch->closed().has_value());
    EXPECT_TRUE(x->ch->closed()->ok());
    EXPECT_EQ(x->ch->count(Kind::kRestart), 0);
  }
  EXPECT_THAT(ended_, ElementsAre("j/1"));
  v1::JobStatus s = JobStatusOf("j");
  EXPECT_EQ(s.state(), "FAILED");
  EXPECT_EQ(s.last_failure(), want);
  EXPECT_EQ(s.restart_count(), 0);
}

TEST_F(CoordinatorTest, RootCauseIsTheJobsFirstFailureAfterRestartsRunOut) {
  Agent a = Joined(MakeJoin("j", "a", 2, 2, 1, /*max_restarts=*/1));
  Agent b = Joined(MakeJoin("j", "b", 2, 2, 1, 1));
  Fail(a, 1, Failure("a", 0, 0, -1, 9));  // SIGKILL, e.g. the OOM killer
  ASSERT_EQ(b.ch->last().restart().restart_count(), 1);
  ASSERT_TRUE(Join(a).ok());
  ASSERT_TRUE(Join(b).ok());
  ASSERT_ROUND_READY(b.ch->last());
  Fail(b, 2, Failure("b", 1, 0, 3, 0, "RuntimeError: NCCL timeout"));

  for (const Agent* x : {&a, &b}) {
    ASSERT_EQ(x->ch->last().kind_case(), Kind::kJobFailed);
    const v1::JobFailed f = x->ch->last().job_failed();
    EXPECT_EQ(f.root_cause(),
              "worker rank 0 (local rank 0) on node host-a [a] was killed by "
              "signal 9 (SIGKILL)");
    EXPECT_EQ(f.first_failure().node_id(), "a");
    ASSERT_EQ(f.failures_size(), 1);  // those of the last round only
    EXPECT_EQ(f.failures(0).node_id(), "b");
  }
  EXPECT_THAT(ended_, ElementsAre("j/1", "j/2"));
  EXPECT_EQ(JobStatusOf("j").restart_count(), 1);
}

TEST_F(CoordinatorTest, DuplicateRankHintsFailTheJob) {
  v1::Join ja = MakeJoin("j", "a", 2, 2);
  ja.set_node_rank_hint(0);
  v1::Join jb = MakeJoin("j", "b", 2, 2);
  jb.set_node_rank_hint(0);
  Agent a = Joined(ja);
  Agent b = Joined(jb);
  for (const Agent* x : {&a, &b}) {
    ASSERT_EQ(x->ch->last().kind_case(), Kind::kJobFailed);
    EXPECT_THAT(x->ch->last().job_failed().root_cause(),
                HasSubstr("--node-rank=0"));
    EXPECT_THAT(x->ch->last().job_failed().root_cause(),
                HasSubstr("round 1 cannot form"));
    ASSERT_TRUE(x->ch->closed().has_value());
  }
  EXPECT_EQ(StateOf("j"), "FAILED");
}

TEST_F(CoordinatorTest, HintsDecideGroupRanks) {
  v1::Join ja = MakeJoin("j", "a", 2, 2);
  ja.set_node_rank_hint(1);
  v1::Join jb = MakeJoin("j", "b", 2, 2);
  jb.set_node_rank_hint(0);
  Agent a = Joined(ja);
  Agent b = Joined(jb);
  EXPECT_EQ(a.ch->last().round_ready().group_rank(), 1);
  EXPECT_EQ(b.ch->last().round_ready().group_rank(), 0);
  EXPECT_EQ(a.ch->last().round_ready().master_addr(), "10.0.0.b");
  EXPECT_EQ(a.ch->last().round_ready().master_port(), b.join.master_port());
}

// ---------- success

TEST_F(CoordinatorTest, SuccessOfEveryMemberEndsTheJobForAll) {
  Agent a = Joined(MakeJoin("j", "a", 2, 2));
  Agent b = Joined(MakeJoin("j", "b", 2, 2));
  Agent spare = Joined(MakeJoin("j", "c", 2, 2));
  Succeed(a, 1);
  EXPECT_EQ(StateOf("j"), "RUNNING");
  EXPECT_FALSE(a.ch->closed().has_value());
  Succeed(b, 1);
  for (const Agent* x : {&a, &b, &spare}) {
    ASSERT_EQ(x->ch->last().kind_case(), Kind::kJobSucceeded)
        << x->join.node_id();
    EXPECT_EQ(x->ch->last().job_succeeded().round(), 1);
    ASSERT_TRUE(x->ch->closed().has_value());
    EXPECT_TRUE(x->ch->closed()->ok());
  }
  EXPECT_THAT(ended_, ElementsAre("j/1"));
  EXPECT_EQ(StateOf("j"), "SUCCEEDED");
}

TEST_F(CoordinatorTest, SucceededMemberThatDisconnectsDoesNotEndTheRound) {
  Agent a = Joined(MakeJoin("j", "a", 2, 2));
  Agent b = Joined(MakeJoin("j", "b", 2, 2));
  Succeed(a, 1);
  coord_.OnDisconnect(a.conn);
  EXPECT_EQ(b.ch->count(Kind::kRestart), 0);
  EXPECT_EQ(StateOf("j"), "RUNNING");
  Succeed(b, 1);
  EXPECT_EQ(b.ch->last().kind_case(), Kind::kJobSucceeded);
  EXPECT_EQ(StateOf("j"), "SUCCEEDED");
}

// ---------- lost agents

TEST_F(CoordinatorTest, DisconnectOfAMemberRestartsTheOthersAtNoCost) {
  Agent a = Joined(MakeJoin("j", "a", 2, 3, 1, 1));
  Agent b = Joined(MakeJoin("j", "b", 2, 3, 1, 1));
  Agent c = Joined(MakeJoin("j", "c", 2, 3, 1, 1));
  coord_.OnDisconnect(b.conn);
  for (const Agent* x : {&a, &c}) {
    ASSERT_EQ(x->ch->last().kind_case(), Kind::kRestart);
    EXPECT_EQ(x->ch->last().restart().round(), 1);
    EXPECT_EQ(x->ch->last().restart().restart_count(), 0);
    EXPECT_EQ(x->ch->last().restart().reason(),
              "node host-b [b] lost (stream closed)");
  }
  EXPECT_EQ(b.ch->count(Kind::kRestart), 0);
  EXPECT_THAT(ended_, ElementsAre("j/1"));
  v1::JobStatus s = JobStatusOf("j");
  EXPECT_EQ(s.state(), "OPEN");
  EXPECT_EQ(s.round(), 2);
  EXPECT_EQ(s.restart_count(), 0);

  // The survivors rejoin; a round of two forms after last call, a and c in
  // their old order.
  ASSERT_TRUE(Join(c).ok());
  ASSERT_TRUE(Join(a).ok());
  clock_.Advance(absl::Seconds(30));
  coord_.Tick();
  ASSERT_ROUND_READY(a.ch->last());
  EXPECT_EQ(a.ch->last().round_ready().group_rank(), 0);
  EXPECT_EQ(c.ch->last().round_ready().group_rank(), 1);
  EXPECT_EQ(c.ch->last().round_ready().store_prefix(), "j/2");
  EXPECT_EQ(c.ch->last().round_ready().restart_count(), 0);
}

TEST_F(CoordinatorTest, LeaveOfAMemberRestartsTheOthers) {
  Agent a = Joined(MakeJoin("j", "a", 2, 2));
  Agent b = Joined(MakeJoin("j", "b", 2, 2));
  v1::Leave leave;
  leave.set_reason("SIGTERM from the operator");
  coord_.OnLeave(b.conn, leave);
  ASSERT_EQ(a.ch->last().kind_case(), Kind::kRestart);
  EXPECT_THAT(a.ch->last().restart().reason(),
              HasSubstr("left: SIGTERM from the operator"));
  ASSERT_TRUE(b.ch->closed().has_value());
  EXPECT_TRUE(b.ch->closed()->ok());
  EXPECT_EQ(coord_.ConnectedAgents(), 1);
  coord_.OnDisconnect(
      b.conn);  // the adapter reports the end of the stream later: no effect
  EXPECT_EQ(a.ch->count(Kind::kRestart), 1);
}

TEST_F(CoordinatorTest, MissedHeartbeatsLoseTheAgent) {
  v1::Join ja = MakeJoin("j", "a", 2, 2);
  ja.set_heartbeat_interval_ms(1000);
  ja.set_heartbeat_timeout_ms(3000);
  v1::Join jb = ja;
  jb.set_node_id("b");
  jb.set_hostname("host-b");
  Agent a = Joined(ja);
  Agent b = Joined(jb);
  ASSERT_ROUND_READY(a.ch->last());
  EXPECT_EQ(coord_.Tick(), clock_.Now() + absl::Seconds(3));

  for (int i = 0; i < 2; ++i) {
    clock_.Advance(absl::Seconds(1));
    coord_.OnHeartbeat(a.conn, v1::Heartbeat());
    coord_.Tick();
  }
  EXPECT_EQ(a.ch->count(Kind::kRestart), 0);
  Succeed(a, 1);  // any message is a heartbeat
  // b was last heard at t0; a at t0+2s. The next deadline is b's.
  EXPECT_EQ(coord_.Tick(), clock_.Now() + absl::Seconds(1));
  clock_.Advance(absl::Milliseconds(999));
  coord_.Tick();
  EXPECT_FALSE(b.ch->closed().has_value());
  clock_.Advance(absl::Milliseconds(1));
  coord_.Tick();

  ASSERT_TRUE(b.ch->closed().has_value());
  EXPECT_EQ(b.ch->closed()->code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(b.ch->closed()->message(), HasSubstr("node host-b [b] for 3s"));
  EXPECT_THAT(b.ch->closed()->message(), HasSubstr("3 heartbeats missed"));
  ASSERT_EQ(a.ch->last().kind_case(), Kind::kRestart);
  EXPECT_THAT(
      a.ch->last().restart().reason(),
      HasSubstr(
          "node host-b [b] lost (no heartbeat for 3s, 3 heartbeats missed)"));
  EXPECT_EQ(coord_.ConnectedAgents(), 1);
  EXPECT_EQ(StateOf("j"), "OPEN");
}

TEST_F(CoordinatorTest, HeartbeatTimeoutWhileOpenRemovesTheWaitingAgent) {
  v1::Join jx = MakeJoin("j", "x", 3, 3);
  jx.set_heartbeat_timeout_ms(2000);
  Agent a = Joined(MakeJoin("j", "a", 3, 3));
  Agent x = Joined(jx);
  EXPECT_EQ(a.ch->last().waiting().joined(), 2);
  clock_.Advance(absl::Seconds(2));
  coord_.Tick();
  EXPECT_EQ(x.ch->closed()->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(a.ch->last().waiting().joined(), 1);
  EXPECT_EQ(StateOf("j"), "OPEN");
}

// ---------- membership

TEST_F(CoordinatorTest, NewcomerBelowMaxScalesUp) {
  Agent a, b;
  ASSERT_NO_FATAL_FAILURE(TwoInRoundOne(&a, &b));

  Agent c = Joined(MakeJoin("j", "c", 2, 3));
  for (const Agent* x : {&a, &b}) {
    ASSERT_EQ(x->ch->last().kind_case(), Kind::kRestart);
    EXPECT_THAT(x->ch->last().restart().reason(),
                HasSubstr("node host-c [c] joined; scaling up"));
    EXPECT_EQ(x->ch->last().restart().restart_count(), 0);
  }
  ASSERT_EQ(c.ch->last().kind_case(), Kind::kWaiting);
  EXPECT_EQ(c.ch->last().waiting().round(), 2);
  EXPECT_EQ(c.ch->last().waiting().joined(), 1);
  EXPECT_THAT(ended_, ElementsAre("j/1"));

  ASSERT_TRUE(Join(b).ok());
  ASSERT_TRUE(Join(a).ok());  // max reached: closes at once
  ASSERT_ROUND_READY(c.ch->last());
  EXPECT_EQ(a.ch->last().round_ready().group_rank(), 0);
  EXPECT_EQ(b.ch->last().round_ready().group_rank(), 1);
  EXPECT_EQ(c.ch->last().round_ready().group_rank(), 2);
  EXPECT_EQ(c.ch->last().round_ready().round(), 2);
  EXPECT_EQ(c.ch->last().round_ready().restart_count(), 0);
}

// A round where some node has finished is not scaled up: that would make every
// node run the finished work again. The newcomer waits and shares the verdict.
TEST_F(CoordinatorTest, NewcomerWaitsAsASpareOnceAMemberHasSucceeded) {
  Agent a, b;
  ASSERT_NO_FATAL_FAILURE(TwoInRoundOne(&a, &b));
  Succeed(a, 1);

  Agent c = Joined(MakeJoin("j", "c", 2, 3));
  EXPECT_EQ(a.ch->count(Kind::kRestart), 0);
  EXPECT_EQ(b.ch->count(Kind::kRestart), 0);
  ASSERT_EQ(c.ch->last().kind_case(), Kind::kWaiting);
  EXPECT_EQ(c.ch->last().waiting().round(), 2);
  EXPECT_EQ(c.ch->last().waiting().deadline_unix_ms(), 0);
  EXPECT_EQ(StateOf("j"), "RUNNING");
  ASSERT_EQ(JobStatusOf("j").waiting_size(), 1);
  EXPECT_EQ(JobStatusOf("j").waiting(0).node_id(), "c");
  EXPECT_TRUE(ended_.empty());

  Succeed(b, 1);
  for (const Agent* x : {&a, &b, &c}) {
    EXPECT_EQ(x->ch->last().kind_case(), Kind::kJobSucceeded);
    ASSERT_TRUE(x->ch->closed().has_value());
    EXPECT_TRUE(x->ch->closed()->ok());
  }
  EXPECT_EQ(StateOf("j"), "SUCCEEDED");
  EXPECT_THAT(ended_, ElementsAre("j/1"));
}

TEST_F(CoordinatorTest, SpareAtMaxWaitsAndJoinsTheNextRound) {
  Agent a = Joined(MakeJoin("j", "a", 2, 2, 1, 1));
  Agent b = Joined(MakeJoin("j", "b", 2, 2, 1, 1));
  Agent c = Joined(MakeJoin("j", "c", 2, 2, 1, 1));
  ASSERT_EQ(c.ch->last().kind_case(), Kind::kWaiting);
  EXPECT_EQ(c.ch->last().waiting().round(), 2);
  EXPECT_EQ(c.ch->last().waiting().joined(), 1);
  EXPECT_EQ(a.ch->count(Kind::kRestart), 0);
  EXPECT_EQ(StateOf("j"), "RUNNING");
  EXPECT_EQ(JobStatusOf("j").waiting(0).node_id(), "c");

  Fail(b, 1, Failure("b", 1, 0, 1));
  ASSERT_EQ(a.ch->last().kind_case(), Kind::kRestart);
  EXPECT_EQ(c.ch->count(Kind::kRestart), 0) << "a spare has no workers to stop";
  ASSERT_TRUE(Join(a).ok());  // with the spare, max is reached
  ASSERT_ROUND_READY(c.ch->last());
  EXPECT_EQ(a.ch->last().round_ready().group_rank(), 0);
  EXPECT_EQ(c.ch->last().round_ready().group_rank(), 1);
  EXPECT_EQ(c.ch->last().round_ready().round(), 2);
  // b comes back too late and becomes the spare.
  ASSERT_TRUE(Join(b).ok());
  EXPECT_EQ(b.ch->last().kind_case(), Kind::kWaiting);
  EXPECT_EQ(a.ch->count(Kind::kRestart), 1);
}

TEST_F(CoordinatorTest, LostSpareDoesNotDisturbTheRound) {
  Agent a = Joined(MakeJoin("j", "a", 1, 1));
  Agent c = Joined(MakeJoin("j", "c", 1, 1));
  Agent d = Joined(MakeJoin("j", "d", 1, 1));
  EXPECT_EQ(d.ch->last().waiting().joined(), 2);
  coord_.OnDisconnect(c.conn);
  EXPECT_EQ(d.ch->last().waiting().joined(), 1);
  EXPECT_EQ(a.ch->count(Kind::kRestart), 0);
  EXPECT_EQ(StateOf("j"), "RUNNING");
}

TEST_F(CoordinatorTest, StaleReportsAreIgnored) {
  Agent a = Joined(MakeJoin("j", "a", 2, 2, 1, 5));
  Agent b = Joined(MakeJoin("j", "b", 2, 2, 1, 5));
  Fail(a, 1, Failure("a", 0, 0, 1));
  ASSERT_EQ(b.ch->last().restart().restart_count(), 1);
  const size_t a_before = a.ch->size();
  const size_t b_before = b.ch->size();
  // b's workers died of a's failure; its report for round 1 arrives after the
  // restart.
  Fail(b, 1, Failure("b", 1, 0, 1));
  Succeed(b, 1);
  EXPECT_EQ(JobStatusOf("j").restart_count(), 1);
  EXPECT_EQ(a.ch->size(), a_before);
  EXPECT_EQ(b.ch->size(), b_before);

  ASSERT_TRUE(Join(a).ok());
  ASSERT_TRUE(Join(b).ok());
  EXPECT_EQ(StateOf("j"), "RUNNING");
  Fail(a, 1, Failure("a", 0, 0, 1));  // still round 1: stale
  Succeed(a, 1);
  Succeed(b, 1);
  EXPECT_EQ(StateOf("j"), "RUNNING");
  EXPECT_EQ(JobStatusOf("j").restart_count(), 1);
  Succeed(a, 2);
  Succeed(b, 2);
  EXPECT_EQ(StateOf("j"), "SUCCEEDED");
}

// ---------- reconnects

TEST_F(CoordinatorTest,
       ReconnectOfAMemberReplacesTheStreamAndResendsRoundReady) {
  Agent a = Joined(MakeJoin("j", "a", 2, 2, 2));
  Agent b = Joined(MakeJoin("j", "b", 2, 2, 2));
  const size_t a_before = a.ch->size();
  Agent b2 = Reconnect(b);

  ASSERT_TRUE(b.ch->closed().has_value());
  EXPECT_EQ(b.ch->closed()->code(), absl::StatusCode::kAborted);
  EXPECT_THAT(b.ch->closed()->message(),
              HasSubstr("replaced by a new session of the same node"));
  ASSERT_EQ(b2.ch->size(), 1u);
  ASSERT_ROUND_READY(b2.ch->last());
  EXPECT_EQ(b2.ch->last().round_ready().round(), 1);
  EXPECT_EQ(b2.ch->last().round_ready().group_rank(), 1);
  EXPECT_EQ(b2.ch->last().round_ready().rank_offset(), 2);
  EXPECT_EQ(a.ch->size(), a_before) << "no restart for a reconnect";
  EXPECT_EQ(coord_.ConnectedAgents(), 2);

  coord_.OnDisconnect(b.conn);  // the old stream's end arrives late: ignored
  EXPECT_EQ(a.ch->size(), a_before);
  Succeed(a, 1);
  Succeed(b2, 1);
  EXPECT_EQ(b2.ch->last().kind_case(), Kind::kJobSucceeded);
  EXPECT_EQ(b.ch->count(Kind::kJobSucceeded), 0);
}

TEST_F(CoordinatorTest, ReconnectWhileWaitingKeepsThePlace) {
  Agent a = Joined(MakeJoin("j", "a", 3, 3));
  Agent b = Joined(MakeJoin("j", "b", 3, 3));
  Agent a2 = Reconnect(a);
  EXPECT_EQ(a.ch->closed()->code(), absl::StatusCode::kAborted);
  ASSERT_EQ(a2.ch->last().kind_case(), Kind::kWaiting);
  EXPECT_EQ(a2.ch->last().waiting().joined(), 2);
  Agent c = Joined(MakeJoin("j", "c", 3, 3));
  EXPECT_EQ(a2.ch->last().round_ready().group_rank(), 0);
  EXPECT_EQ(c.ch->last().round_ready().group_rank(), 2);
}

// ---------- rerun, retention

// An agent whose session broke just as the job ended reconnects with its node
// id: it hears the verdict it missed, whether or not the others are still
// connected, and no rerun starts.
TEST_F(CoordinatorTest, MemberThatMissedTheVerdictHearsItOnReconnect) {
  Agent a = Joined(MakeJoin("j", "a", 2, 2));
  Agent b = Joined(MakeJoin("j", "b", 2, 2));
  ASSERT_ROUND_READY(b.ch->last());
  Fail(b, 1, Failure("b", 1, 0, 7, 0, "ValueError: bad"));
  ASSERT_EQ(StateOf("j"), "FAILED");
  const std::string cause = a.ch->last().job_failed().root_cause();
  EXPECT_THAT(cause, HasSubstr("exited with code 7"));

  // a's stream broke before the verdict got through; b is still connected.
  coord_.OnDisconnect(a.conn);
  Agent a2 = Reconnect(a);
  ASSERT_EQ(a2.ch->last().kind_case(), Kind::kJobFailed);
  EXPECT_EQ(a2.ch->last().job_failed().root_cause(), cause);
  EXPECT_EQ(a2.ch->last().job_failed().first_failure().exit_code(), 7);
  ASSERT_TRUE(a2.ch->closed().has_value());
  EXPECT_TRUE(a2.ch->closed()->ok());
  EXPECT_EQ(a2.ch->count(Kind::kWaiting), 0);

  // Once everyone is gone, it is still the verdict, not a lonely rerun.
  coord_.OnDisconnect(a2.conn);
  coord_.OnDisconnect(b.conn);
  EXPECT_EQ(coord_.ConnectedAgents(), 0);
  Agent a3 = Reconnect(a);
  ASSERT_EQ(a3.ch->last().kind_case(), Kind::kJobFailed);
  EXPECT_EQ(a3.ch->last().job_failed().root_cause(), cause);
  EXPECT_EQ(StateOf("j"), "FAILED");
  EXPECT_EQ(JobStatusOf("j").round(), 1);

  // Likewise after a success.
  Agent c = Joined(MakeJoin("k", "c", 1, 1));
  Succeed(c, 1);
  coord_.OnDisconnect(c.conn);
  Agent c2 = Reconnect(c);
  ASSERT_EQ(c2.ch->last().kind_case(), Kind::kJobSucceeded);
  EXPECT_EQ(c2.ch->last().job_succeeded().round(), 1);
  EXPECT_EQ(StateOf("k"), "SUCCEEDED");
}

TEST_F(CoordinatorTest, RerunAfterTheEndOnceEveryAgentHasGone) {
  Agent a = Joined(MakeJoin("j", "a", 1, 1));
  Succeed(a, 1);
  ASSERT_EQ(StateOf("j"), "SUCCEEDED");

  // A rerun's agents have new node ids (a node of the ended job would get the
  // verdict again: see MemberThatMissedTheVerdictHearsItOnReconnect).
  Agent again = NewAgent(MakeJoin("j", "x", 1, 1));
  absl::Status s = Join(again);
  // Transient (the agent retries), not a configuration error.
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("job j has just ended"));
  EXPECT_THAT(s.message(),
              HasSubstr("still disconnecting — this node joins again shortly"));

  coord_.OnDisconnect(a.conn);
  EXPECT_EQ(coord_.ConnectedAgents(), 0);
  // A rerun may even change sizes: it is a new run of the job.
  Agent r1 = Joined(MakeJoin("j", "x", 2, 2, 1, 2));
  EXPECT_EQ(r1.ch->last().waiting().round(), 2);
  Agent r2 = Joined(MakeJoin("j", "y", 2, 2, 1, 2));
  ASSERT_ROUND_READY(r2.ch->last());
  EXPECT_EQ(r2.ch->last().round_ready().store_prefix(), "j/2");
  EXPECT_EQ(r2.ch->last().round_ready().restart_count(), 0);
  EXPECT_EQ(r2.ch->last().round_ready().max_restarts(), 2);
  v1::JobStatus st = JobStatusOf("j");
  EXPECT_EQ(st.state(), "RUNNING");
  EXPECT_EQ(st.last_failure(), "");
}

TEST_F(CoordinatorTest, EndedJobIsForgottenAfterRetention) {
  Agent a = Joined(MakeJoin("j", "a", 1, 1));
  Fail(a, 1, Failure("a", 0, 0, 2));
  ASSERT_EQ(StateOf("j"), "FAILED");
  // Still connected: only the agent's heartbeat deadline is pending, no
  // retention yet.
  EXPECT_EQ(coord_.Tick(), clock_.Now() + absl::Hours(10));
  clock_.Advance(absl::Minutes(1));
  coord_.OnDisconnect(a.conn);
  EXPECT_EQ(coord_.Tick(), clock_.Now() + absl::Minutes(10));
  clock_.Advance(absl::Minutes(10) - absl::Seconds(1));
  coord_.Tick();
  EXPECT_EQ(coord_.JobCount(), 1);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(coord_.Tick(), absl::InfiniteFuture());
  EXPECT_EQ(coord_.JobCount(), 0);
  EXPECT_THAT(ended_, ElementsAre("j/1", "j/"));
  EXPECT_EQ(coord_.Status("").jobs_size(), 0);

  // Forgotten: the id is free again, from round 1.
  Agent b = Joined(MakeJoin("j", "b", 1, 1));
  EXPECT_EQ(b.ch->last().round_ready().round(), 1);
}

TEST_F(CoordinatorTest, AgentsThatNeverHangUpAfterTheEndExpireOnHeartbeat) {
  v1::Join ja = MakeJoin("j", "a", 1, 1);
  ja.set_heartbeat_timeout_ms(5000);
  Agent a = Joined(ja);
  Succeed(a, 1);
  clock_.Advance(absl::Seconds(5));
  coord_.Tick();
  EXPECT_EQ(coord_.ConnectedAgents(), 0);
  EXPECT_EQ(a.ch->close_calls(), 1) << "closed once, with OK, at the end";
  EXPECT_TRUE(Join(NewAgent(MakeJoin("j", "a", 1, 1))).ok());
}

// ---------- isolation, Tick

TEST_F(CoordinatorTest, JobsAreIsolated) {
  // The same node ids in two jobs.
  Agent xa = Joined(MakeJoin("x", "a", 2, 2));
  Agent ya = Joined(MakeJoin("y", "a", 1, 1, 1, 0));
  ASSERT_ROUND_READY(ya.ch->last());
  EXPECT_EQ(ya.ch->last().round_ready().store_prefix(), "y/1");
  EXPECT_EQ(xa.ch->last().kind_case(), Kind::kWaiting);

  Fail(ya, 1, Failure("a", 0, 0, 1));
  EXPECT_EQ(ya.ch->last().kind_case(), Kind::kJobFailed);
  EXPECT_EQ(xa.ch->last().kind_case(), Kind::kWaiting);
  EXPECT_FALSE(xa.ch->closed().has_value());
  EXPECT_EQ(StateOf("x"), "OPEN");

  // Different sizes under another id are no mismatch.
  Agent xb = Joined(MakeJoin("x", "b", 2, 2));
  ASSERT_ROUND_READY(xb.ch->last());
  EXPECT_EQ(xb.ch->last().round_ready().store_prefix(), "x/1");
  EXPECT_EQ(coord_.JobCount(), 2);
  v1::GetStatusResponse all = coord_.Status("");
  ASSERT_EQ(all.jobs_size(), 2);
  EXPECT_EQ(all.jobs(0).job_id(), "x");
  EXPECT_EQ(all.jobs(0).state(), "RUNNING");
  EXPECT_EQ(all.jobs(1).state(), "FAILED");
  EXPECT_EQ(coord_.Status("nope").jobs_size(), 0);
}

TEST_F(CoordinatorTest, TickReturnsTheEarliestDeadline) {
  EXPECT_EQ(coord_.Tick(), absl::InfiniteFuture());
  const absl::Time t0 = clock_.Now();
  v1::Join ja = MakeJoin("j", "a", 2, 3);
  ja.set_join_timeout_ms(100'000);
  ja.set_last_call_timeout_ms(20'000);
  Agent a = Joined(ja);
  EXPECT_EQ(coord_.Tick(), t0 + absl::Seconds(100));  // join_timeout
  clock_.Advance(absl::Seconds(10));
  Agent b = Joined(MakeJoin("j", "b", 2, 3));
  EXPECT_EQ(coord_.Tick(),
            t0 + absl::Seconds(30));  // last call, armed at t0 + 10s
  v1::Join jh = MakeJoin("k", "h", 2, 2);
  jh.set_heartbeat_timeout_ms(4000);
  Agent h = Joined(jh);
  EXPECT_EQ(coord_.Tick(), t0 + absl::Seconds(14));  // h's heartbeat
  clock_.Advance(absl::Seconds(3));
  coord_.OnHeartbeat(h.conn, v1::Heartbeat());
  EXPECT_EQ(coord_.Tick(), t0 + absl::Seconds(17));
}

// ---------- status, logs

TEST_F(CoordinatorTest, StatusReportsMembersWaitingAndCounters) {
  Agent a = Joined(MakeJoin("j", "a", 1, 1, 4, 2));
  Agent b = Joined(MakeJoin("j", "b", 1, 1, 4, 2));
  v1::JobStatus s = JobStatusOf("j");
  EXPECT_EQ(s.job_id(), "j");
  EXPECT_EQ(s.state(), "RUNNING");
  EXPECT_EQ(s.min_nodes(), 1);
  EXPECT_EQ(s.max_nodes(), 1);
  EXPECT_EQ(s.max_restarts(), 2);
  ASSERT_EQ(s.members_size(), 1);
  EXPECT_EQ(s.members(0).node_id(), "a");
  EXPECT_EQ(s.members(0).local_world_size(), 4);
  EXPECT_EQ(s.members(0).advertised_addr(), "10.0.0.a");
  ASSERT_EQ(s.waiting_size(), 1);
  EXPECT_EQ(s.waiting(0).node_id(), "b");
  EXPECT_EQ(JobStateName(JobState::kSucceeded), "SUCCEEDED");
}

TEST_F(CoordinatorTest, TransitionsAreLoggedInOneLineEach) {
  std::vector<std::string> lines;
  absl::Mutex mu;
  SetLogSink([&](LogLevel, const std::string& line) {
    absl::MutexLock lock(&mu);
    lines.push_back(line);
  });
  Agent a = Joined(MakeJoin("j", "a", 2, 2, 2));
  Agent b = Joined(MakeJoin("j", "b", 2, 2, 1));
  coord_.OnDisconnect(b.conn);
  SetLogSink(nullptr);
  auto has = [&](const std::string& text) {
    for (const auto& l : lines) {
      if (l.find(text) != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_TRUE(has("job j: round 1 ready: 2 nodes, 3 ranks"))
      << ::testing::PrintToString(lines);
  EXPECT_TRUE(
      has("job j: node host-b [b] lost (stream closed); restarting round 1"))
      << ::testing::PrintToString(lines);
}

// ---------- threads

TEST_F(CoordinatorTest, ConcurrentJobsFromManyThreads) {
  constexpr int kJobs = 8;
  constexpr int kNodes = 4;
  std::vector<Agent> agents;
  for (int j = 0; j < kJobs; ++j) {
    for (int n = 0; n < kNodes; ++n) {
      agents.push_back(NewAgent(MakeJoin(
          absl::StrCat("job", j), absl::StrCat("n", n), kNodes, kNodes)));
    }
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kNodes; ++t) {
    threads.emplace_back([&, t] {
      for (int j = 0; j < kJobs; ++j) {
        const Agent& a = agents[j * kNodes + t];
        EXPECT_TRUE(coord_.OnJoin(a.conn, a.join, a.ch).ok());
        coord_.OnHeartbeat(a.conn, v1::Heartbeat());
        coord_.Tick();
      }
    });
  }
  for (auto& th : threads) th.join();
  std::map<std::string, std::vector<int>> ranks;
  for (const Agent& a : agents) {
    ASSERT_EQ(a.ch->last().kind_case(), Kind::kRoundReady) << a.join.job_id();
    ranks[a.join.job_id()].push_back(a.ch->last().round_ready().group_rank());
  }
  for (auto& [job, r] : ranks) {
    std::sort(r.begin(), r.end());
    EXPECT_THAT(r, ElementsAre(0, 1, 2, 3)) << job;
  }
}

}  // namespace
}  // namespace muster::rendezvous
