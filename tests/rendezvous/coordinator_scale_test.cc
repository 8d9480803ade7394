// The Coordinator at 10,000 agents (in process, FakeClock): what each agent
// is sent, and that the total stays linear in the number of agents. A join
// must not send Waiting to every waiting agent, a RoundReady must not list
// every member, a heartbeat deadline must fire for exactly the agent that
// went silent. Speed itself is measured in bench/ (muster-loadgen); these
// tests count messages, which is what made the cost quadratic.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "muster/common/logging.h"
#include "muster/platform/clock.h"
#include "muster/rendezvous/coordinator.h"
#include "rendezvous/src/core/deadline_queue.h"
#include "rendezvous/src/core/round_peers.h"

namespace muster::rendezvous {
namespace {

using Kind = v1::ServerMessage::KindCase;

constexpr int kAgents = 10'000;

// Counts what one agent is sent, keeping the last message of each kind.
class CountingChannel : public AgentChannel {
 public:
  void Send(const v1::ServerMessage& msg) override {
    absl::MutexLock lock(&mu_);
    ++count_[msg.kind_case()];
    ++total_;
    if (closed_) ++after_close_;
    last_[msg.kind_case()] = msg;
  }
  void Close(const absl::Status&) override {
    absl::MutexLock lock(&mu_);
    ++closes_;
    closed_ = true;
  }
  int count(Kind k) const {
    absl::MutexLock lock(&mu_);
    return count_[k];
  }
  int total() const {
    absl::MutexLock lock(&mu_);
    return total_;
  }
  int closes() const {
    absl::MutexLock lock(&mu_);
    return closes_;
  }
  int after_close() const {
    absl::MutexLock lock(&mu_);
    return after_close_;
  }
  v1::ServerMessage last(Kind k) const {
    absl::MutexLock lock(&mu_);
    return last_[k];
  }

 private:
  mutable absl::Mutex mu_;
  int count_[8] ABSL_GUARDED_BY(mu_) = {};
  v1::ServerMessage last_[8] ABSL_GUARDED_BY(mu_);
  int total_ ABSL_GUARDED_BY(mu_) = 0;
  int closes_ ABSL_GUARDED_BY(mu_) = 0;
  int after_close_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

class CoordinatorScaleTest : public ::testing::Test {
 protected:
  CoordinatorScaleTest() : coord_(Options(), &clock_) {
    // 10,000 "joined" lines would drown the test log.
    SetMinLogLevel(LogLevel::kWarning);
  }

  static CoordinatorOptions Options() {
    CoordinatorOptions o;
    o.default_join_timeout = absl::Seconds(600);
    o.default_last_call_timeout = absl::Seconds(30);
    o.default_heartbeat_timeout = absl::Seconds(1);
    o.waiting_update_interval = absl::Seconds(1);
    o.event_log_level = LogLevel::kDebug;
    return o;
  }

  v1::Join MakeJoin(const std::string& job, int i, int min_nodes,
                    int max_nodes) {
    v1::Join j;
    j.set_job_id(job);
    j.set_node_id(absl::StrCat("n", i));
    j.set_hostname(absl::StrCat("h", i));
    j.set_advertised_addr(
        absl::StrCat("10.", i / 65536, ".", i / 256 % 256, ".", i % 256));
    j.set_local_world_size(1 + i % 3);
    j.set_min_nodes(min_nodes);
    j.set_max_nodes(max_nodes);
    j.set_node_rank_hint(-1);
    j.set_master_port(20000 + i % 40000);
    j.set_heartbeat_interval_ms(250);
    j.set_heartbeat_timeout_ms(1000);
    j.set_lease_timeout_ms(1000);  // a silent node is lost after 1 s
    return j;
  }

  // Agent i of `job` joins on a new stream.
  void JoinAgent(const std::string& job, int i, int min_nodes, int max_nodes) {
    if (static_cast<int>(channels_.size()) <= i) channels_.resize(i + 1);
    if (static_cast<int>(conns_.size()) <= i) conns_.resize(i + 1);
    channels_[i] = std::make_shared<CountingChannel>();
    conns_[i] = next_conn_++;
    ASSERT_TRUE(coord_
                    .OnJoin(conns_[i], MakeJoin(job, i, min_nodes, max_nodes),
                            channels_[i])
                    .ok());
  }
  void Rejoin(const std::string& job, int i, int min_nodes, int max_nodes) {
    ASSERT_TRUE(coord_
                    .OnJoin(conns_[i], MakeJoin(job, i, min_nodes, max_nodes),
                            channels_[i])
                    .ok());
  }

  int64_t TotalMessages() const {
    int64_t n = 0;
    for (const auto& c : channels_) n += c == nullptr ? 0 : c->total();
    return n;
  }

  FakeClock clock_;
  Coordinator coord_;
  std::vector<std::shared_ptr<CountingChannel>> channels_;
  std::vector<ConnectionId> conns_;
  ConnectionId next_conn_ = 1;
};

TEST_F(CoordinatorScaleTest, TenThousandAgentsFormOneRoundWithLinearMessages) {
  for (int i = 0; i < kAgents; ++i) JoinAgent("big", i, kAgents, kAgents);

  int64_t peer_entries = 0;
  for (int i = 0; i < kAgents; ++i) {
    const CountingChannel& ch = *channels_[i];
    ASSERT_EQ(ch.count(Kind::kRoundReady), 1) << "agent " << i;
    const v1::RoundReady r = ch.last(Kind::kRoundReady).round_ready();
    ASSERT_EQ(r.round(), 1);
    // Nobody left: arrival order is the rank order.
    ASSERT_EQ(r.group_rank(), i);
    ASSERT_EQ(r.group_world_size(), kAgents);
    ASSERT_TRUE(r.peers_partial());
    ASSERT_EQ(r.master_addr(), "10.0.0.0");
    // The peers its preflight needs: itself, the master, both ring neighbours
    // and a sample, by group rank, each with its reserved port.
    std::vector<int> ranks;
    for (const v1::Peer& p : r.peers()) {
      ranks.push_back(p.group_rank());
      ASSERT_EQ(p.node_id(), absl::StrCat("n", p.group_rank()));
      ASSERT_GT(p.reserved_port(), 0);
    }
    ASSERT_TRUE(std::is_sorted(ranks.begin(), ranks.end()));
    for (int want : {0, i, (i + 1) % kAgents, (i + kAgents - 1) % kAgents}) {
      ASSERT_TRUE(std::count(ranks.begin(), ranks.end(), want) == 1)
          << "agent " << i << " lacks peer " << want;
    }
    ASSERT_LE(r.peers_size(), 4 + kPeerSample);
    peer_entries += r.peers_size();
    // The heartbeat budget: 10,000 agents at 8,000 heartbeats a second.
    ASSERT_EQ(r.heartbeat_interval_ms(), 1250);
  }
  // What an agent makes of it: 1.25 s with the default 5 s lease (8,000
  // heartbeats a second in all, not 40,000); these agents' 1 s lease keeps
  // them at 250 ms (4 heartbeats per lease).
  const absl::Duration suggested = absl::Milliseconds(1250);
  EXPECT_EQ(FollowedHeartbeatInterval(absl::Milliseconds(250), kDefaultLease,
                                      suggested),
            absl::Milliseconds(1250));
  EXPECT_EQ(FollowedHeartbeatInterval(absl::Milliseconds(250), absl::Seconds(1),
                                      suggested),
            absl::Milliseconds(250));
  // The rank offsets are prefix sums over the whole group even though each
  // agent sees only a few peers: the last agent's offset + its size = world.
  const v1::RoundReady last =
      channels_[kAgents - 1]->last(Kind::kRoundReady).round_ready();
  EXPECT_EQ(last.rank_offset() + 1 + (kAgents - 1) % 3, last.world_size());
  // Linear: one Waiting per join (the joiner's own) beyond the first few
  // dozen, one RoundReady each, about 12 peer entries each (a full list would
  // be 10^8).
  EXPECT_LE(TotalMessages(), 3 * kAgents);
  EXPECT_LE(peer_entries, (5 + kPeerSample) * kAgents);
  EXPECT_EQ(coord_.ConnectedAgents(), kAgents);
}

TEST_F(CoordinatorScaleTest, WaitingUpdatesAreCoalescedToOnePerInterval) {
  // min is never reached: the round stays open.
  const int min = kAgents + 1;
  for (int i = 0; i < kAgents; ++i) JoinAgent("wait", i, min, min);
  // Each agent heard Waiting when it joined; a join does not tell everyone.
  EXPECT_LE(TotalMessages(), 2 * kAgents);
  for (int i = 100; i < kAgents; i += 997) {
    EXPECT_EQ(channels_[i]->count(Kind::kWaiting), 1) << "agent " << i;
    EXPECT_EQ(channels_[i]->last(Kind::kWaiting).waiting().joined(), i + 1);
  }
  // Within the interval nothing more; once it passes, one update each with
  // the count of now.
  clock_.Advance(absl::Milliseconds(500));
  coord_.Tick();
  EXPECT_EQ(channels_[100]->count(Kind::kWaiting), 1);
  const absl::Time next = coord_.Tick();
  EXPECT_LE(next, clock_.Now() + absl::Milliseconds(500));
  clock_.Advance(absl::Milliseconds(500));
  // Keep every agent alive across the second.
  for (int i = 0; i < kAgents; ++i) coord_.OnHeartbeat(conns_[i], {});
  const int64_t before = TotalMessages();
  coord_.Tick();
  EXPECT_EQ(TotalMessages() - before, kAgents);
  for (int i = 0; i < kAgents; i += 1111) {
    EXPECT_EQ(channels_[i]->last(Kind::kWaiting).waiting().joined(), kAgents);
  }
  // No change: no more updates.
  clock_.Advance(absl::Milliseconds(500));
  for (int i = 0; i < kAgents; ++i) coord_.OnHeartbeat(conns_[i], {});
  clock_.Advance(absl::Milliseconds(600));
  for (int i = 0; i < kAgents; ++i) coord_.OnHeartbeat(conns_[i], {});
  coord_.Tick();
  EXPECT_EQ(TotalMessages() - before, kAgents);
}

TEST_F(CoordinatorScaleTest, WaitingUpdatesOfLargerJobsComeLessOften) {
  // 20,000 waiting agents: an update at most every 2 s (100 us per agent),
  // not every second, so a long gathering does not cost n messages a second.
  constexpr int kMany = 2 * kAgents;
  for (int i = 0; i < kMany; ++i) JoinAgent("many", i, kMany + 1, kMany + 1);
  const int64_t joined = TotalMessages();
  EXPECT_LE(joined, 2 * kMany);
  for (int step = 0; step < 3; ++step) {
    clock_.Advance(absl::Milliseconds(500));
    for (int i = 0; i < kMany; ++i) coord_.OnHeartbeat(conns_[i], {});
    coord_.Tick();
  }
  EXPECT_EQ(TotalMessages(), joined) << "an update within 1.5 s";
  clock_.Advance(absl::Milliseconds(600));
  for (int i = 0; i < kMany; ++i) coord_.OnHeartbeat(conns_[i], {});
  coord_.Tick();
  EXPECT_EQ(TotalMessages() - joined, kMany) << "one update each after 2 s";
  EXPECT_EQ(channels_[0]->last(Kind::kWaiting).waiting().joined(), kMany);
}

TEST_F(CoordinatorScaleTest, SilentAgentAmongTenThousandIsLostAndRoundReforms) {
  for (int i = 0; i < kAgents; ++i) JoinAgent("hb", i, kAgents - 1, kAgents);
  ASSERT_EQ(channels_[0]->count(Kind::kRoundReady), 1);

  // Three heartbeat timeouts pass; everyone but agent 1234 keeps beating.
  const int silent = 1234;
  for (int step = 0; step < 12; ++step) {
    clock_.Advance(absl::Milliseconds(250));
    for (int i = 0; i < kAgents; ++i) {
      if (i != silent) coord_.OnHeartbeat(conns_[i], {});
    }
    coord_.Tick();
    if (channels_[silent]->closes() > 0) break;
  }
  ASSERT_EQ(channels_[silent]->closes(), 1) << "the silent agent was not lost";
  EXPECT_EQ(coord_.ConnectedAgents(), kAgents - 1);
  for (int i = 0; i < kAgents; ++i) {
    if (i == silent) continue;
    ASSERT_EQ(channels_[i]->count(Kind::kRestart), 1) << "agent " << i;
    ASSERT_EQ(channels_[i]->closes(), 0) << "agent " << i << " lost too";
  }
  EXPECT_NE(channels_[0]->last(Kind::kRestart).restart().reason().find("h1234"),
            std::string::npos);

  // The survivors rejoin; with min = 9,999 last call then closes the round.
  for (int i = 0; i < kAgents; ++i) {
    if (i != silent) Rejoin("hb", i, kAgents - 1, kAgents);
  }
  clock_.Advance(absl::Seconds(30));
  for (int i = 0; i < kAgents; ++i) {
    if (i != silent) coord_.OnHeartbeat(conns_[i], {});
  }
  coord_.Tick();
  for (int i = 0; i < kAgents; ++i) {
    if (i == silent) continue;
    ASSERT_EQ(channels_[i]->count(Kind::kRoundReady), 2) << "agent " << i;
    const v1::RoundReady r =
        channels_[i]->last(Kind::kRoundReady).round_ready();
    ASSERT_EQ(r.round(), 2);
    // Survivors keep their order; those after the lost one move up by one.
    ASSERT_EQ(r.group_rank(), i < silent ? i : i - 1);
    ASSERT_EQ(r.group_world_size(), kAgents - 1);
    ASSERT_EQ(channels_[i]->after_close(), 0);
  }
  EXPECT_LE(TotalMessages(), 10 * kAgents);
}

TEST_F(CoordinatorScaleTest, HeartbeatDeadlinesWakeTickOnAGridNotEachOne) {
  // 1,000 agents join 1 ms apart and then go silent: their deadlines (1 s
  // after each join) are 1 ms apart. Driven only by the times Tick asks for,
  // every agent is lost no more than 50 ms late, and Tick runs about once per
  // 50 ms, not once per deadline.
  constexpr int kSilent = 1000;
  std::vector<absl::Time> deadline(kSilent);
  for (int i = 0; i < kSilent; ++i) {
    JoinAgent("grid", i, kSilent + 1, kSilent + 1);  // the round never closes
    deadline[i] = clock_.Now() + absl::Seconds(1);
    clock_.Advance(absl::Milliseconds(1));
  }
  std::vector<bool> lost(kSilent, false);
  int ticks = 0;
  int lost_count = 0;
  while (lost_count < kSilent && ticks < 5 * kSilent) {
    const absl::Time next = coord_.Tick();
    ++ticks;
    for (int i = 0; i < kSilent; ++i) {
      if (lost[i] || channels_[i]->closes() == 0) continue;
      lost[i] = true;
      ++lost_count;
      EXPECT_GE(clock_.Now(), deadline[i]) << "agent " << i << " lost early";
      EXPECT_LE(clock_.Now(), deadline[i] + absl::Milliseconds(50))
          << "agent " << i << " lost late";
    }
    if (lost_count == kSilent) break;
    ASSERT_LT(next, absl::InfiniteFuture());
    if (next > clock_.Now()) clock_.Set(next);
  }
  EXPECT_EQ(lost_count, kSilent);
  // 1 s of deadlines on a 50 ms grid is about 20 wake-ups, plus the coalesced
  // Waiting updates (one a second); one per deadline would be 1,000.
  EXPECT_LE(ticks, 60);
}

// A heartbeat must not wait for the Coordinator's lock: heartbeats are most of
// the events, and one waiting behind a long locked section (a round of
// thousands forming) holds up a gRPC thread that every other stream needs.
// on_round_end runs under that lock, so blocking in it holds the lock.
TEST(CoordinatorLockTest, HeartbeatDoesNotWaitForTheLock) {
  FakeClock clock;
  absl::Mutex mu;
  bool in_round_end = false;
  bool release = false;
  CoordinatorOptions options;
  options.default_heartbeat_timeout = absl::Seconds(1);
  options.event_log_level = LogLevel::kDebug;
  options.on_round_end = [&](const std::string&) {
    absl::MutexLock lock(&mu);
    in_round_end = true;
    // Bounded: a heartbeat that did wait makes the test fail, not hang.
    mu.AwaitWithTimeout(absl::Condition(&release), absl::Seconds(30));
  };
  Coordinator coord(options, &clock);
  std::vector<std::shared_ptr<CountingChannel>> channels;
  auto join = [&](const std::string& job, ConnectionId conn) {
    v1::Join j;
    j.set_job_id(job);
    j.set_node_id(absl::StrCat("n", conn));
    j.set_hostname(absl::StrCat("h", conn));
    j.set_local_world_size(1);
    j.set_min_nodes(1);
    j.set_max_nodes(1);
    j.set_node_rank_hint(-1);
    j.set_heartbeat_timeout_ms(1000);
    j.set_lease_timeout_ms(1000);  // a silent node is lost after 1 s
    ASSERT_TRUE(
        coord
            .OnJoin(conn, j,
                    channels.emplace_back(std::make_shared<CountingChannel>()))
            .ok());
  };
  join("a", 1);
  join("b", 2);
  ASSERT_EQ(coord.ConnectedAgents(), 2);
  clock.Advance(absl::Milliseconds(800));

  // Job a succeeds: its round ends under the lock, in on_round_end.
  std::thread succeed([&] {
    v1::WorkersSucceeded s;
    s.set_round(1);
    coord.OnWorkersSucceeded(1, s);
  });
  {
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(
        mu.AwaitWithTimeout(absl::Condition(&in_round_end), absl::Seconds(30)));
  }
  // The lock is held now; b's heartbeat still goes through.
  absl::Notification beat;
  std::thread heartbeat([&] {
    coord.OnHeartbeat(2, {});
    beat.Notify();
  });
  const bool beat_in_time =
      beat.WaitForNotificationWithTimeout(absl::Seconds(10));
  {
    absl::MutexLock lock(&mu);
    release = true;
  }
  heartbeat.join();
  succeed.join();
  EXPECT_TRUE(beat_in_time) << "a heartbeat waited for the Coordinator's lock";

  // And it counted: 1.5 s after b joined (0.7 s after the heartbeat) b is
  // alive; 1 s after the heartbeat it is lost.
  clock.Advance(absl::Milliseconds(700));
  coord.Tick();
  EXPECT_EQ(channels[1]->closes(), 0);
  clock.Advance(absl::Milliseconds(400));
  coord.Tick();
  EXPECT_EQ(channels[1]->closes(), 1);
}

TEST(DeadlineQueueTest, ExpiresOnlyWhatIsDueAndRearmsTheRest) {
  DeadlineQueue<int> q;
  const absl::Time t0 = absl::FromUnixSeconds(100);
  absl::flat_hash_map<int, absl::Time> actual;
  bool gone = false;
  for (int k = 0; k < 5; ++k) {
    actual[k] = t0 + absl::Seconds(1);
    q.Arm(k, actual[k]);
  }
  // Keys 1 and 3 were heard from since: their true deadline moved on.
  actual[1] = t0 + absl::Seconds(2);
  actual[3] = t0 + absl::Seconds(3);
  std::vector<int> expired;
  auto truth = [&](int k) -> std::optional<absl::Time> {
    if (k == 4 && gone) return std::nullopt;
    return actual[k];
  };
  q.PopExpired(t0 + absl::Milliseconds(500), truth, &expired);
  EXPECT_TRUE(expired.empty());
  q.PopExpired(t0 + absl::Seconds(1), truth, &expired);
  std::sort(expired.begin(), expired.end());
  EXPECT_EQ(expired, (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(q.Next(truth), t0 + absl::Seconds(2));
  // An earlier deadline for an armed key wins; a removed key never expires.
  q.Arm(3, t0 + absl::Milliseconds(1500));
  q.Remove(1);
  expired.clear();
  actual[3] = t0 + absl::Milliseconds(1500);
  q.PopExpired(t0 + absl::Seconds(10), truth, &expired);
  EXPECT_EQ(expired, (std::vector<int>{3}));
  EXPECT_EQ(q.Next(truth), absl::InfiniteFuture());
  EXPECT_EQ(q.size(), 0u);

  // Next brings a moved key to its true deadline, and forgets a gone one.
  actual[2] = t0 + absl::Seconds(20);
  q.Arm(2, t0 + absl::Seconds(11));
  q.Arm(4, t0 + absl::Seconds(12));
  actual[4] = t0 + absl::Seconds(12);
  EXPECT_EQ(q.Next(truth), t0 + absl::Seconds(12));
  gone = true;
  EXPECT_EQ(q.Next(truth), t0 + absl::Seconds(20));
  EXPECT_EQ(q.size(), 1u);
}

TEST(RoundPeersTest, SmallRoundsListEveryoneLargeOnesAFewRepeatably) {
  EXPECT_EQ(RoundReadyPeerRanks(3, 1, 7), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(RoundReadyPeerRanks(kFullPeerListMax, 5, 7).size(),
            static_cast<size_t>(kFullPeerListMax));
  const std::vector<int> a = RoundReadyPeerRanks(1000, 999, 7);
  EXPECT_EQ(a, RoundReadyPeerRanks(1000, 999, 7));  // same round, same list
  // 999, 0 (also its right neighbour on the ring), 998, and the sample.
  EXPECT_EQ(a.size(), static_cast<size_t>(3 + kPeerSample));
  for (int want : {0, 998, 999}) {
    EXPECT_EQ(std::count(a.begin(), a.end(), want), 1) << want;
  }
  EXPECT_NE(
      RoundReadyPeerRanks(1000, 500, 7),
      RoundReadyPeerRanks(1000, 500, 8));  // another round, another sample
}

}  // namespace
}  // namespace muster::rendezvous
