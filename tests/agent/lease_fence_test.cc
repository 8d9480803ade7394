// Lease fencing, the agent's side (agent/src/lease_fence.h), on a FakeClock,
// and the property both sides exist for: on any timeline of sends, receipts
// and renewals, the agent's workers are killed before the server could
// declare the silent node lost (rendezvous/src/lease.h).
#include "agent/src/lease_fence.h"

#include <random>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "muster/platform/clock.h"
#include "rendezvous/src/lease.h"

namespace muster::agent {
namespace {

TEST(LeaseFenceTest, UnarmedUntilTheFirstRenewal) {
  FakeClock clock;
  LeaseFence fence(absl::Seconds(5), &clock);
  fence.NextSeq();
  clock.Advance(absl::Hours(1));
  EXPECT_FALSE(fence.armed());
  EXPECT_FALSE(fence.FenceDue()) << "a server that never renews never fences";
}

TEST(LeaseFenceTest, TheLeaseRunsFromTheSendTimeOfTheRenewedMessage) {
  FakeClock clock;
  const absl::Time t0 = clock.Now();
  LeaseFence fence(absl::Seconds(5), &clock);
  const int64_t s1 = fence.NextSeq();  // sent at t0
  clock.Advance(absl::Seconds(1));
  const int64_t s2 = fence.NextSeq();  // sent at t0 + 1 s
  clock.Advance(absl::Seconds(1));
  fence.OnRenewed(s1);  // the answer took 2 s: the lease is still from t0
  EXPECT_EQ(fence.LeaseEnd(), t0 + absl::Seconds(5));
  EXPECT_EQ(fence.FenceAt(), t0 + absl::Milliseconds(3500));
  fence.OnRenewed(s2);
  EXPECT_EQ(fence.LeaseEnd(), t0 + absl::Seconds(6));
  fence.OnRenewed(s1);  // late duplicates never shorten it
  EXPECT_EQ(fence.LeaseEnd(), t0 + absl::Seconds(6));
  fence.OnRenewed(12345);  // never sent
  EXPECT_EQ(fence.LeaseEnd(), t0 + absl::Seconds(6));
  clock.Set(t0 + absl::Milliseconds(4499));
  EXPECT_FALSE(fence.FenceDue());
  clock.Set(t0 + absl::Milliseconds(4500));
  EXPECT_TRUE(fence.FenceDue());
  EXPECT_EQ(fence.FenceGrace(), absl::Seconds(1));
}

TEST(LeaseFenceTest, RegularRenewalsNeverFence) {
  FakeClock clock;
  LeaseFence fence(absl::Seconds(1), &clock);  // the shortest lease
  int64_t pending = 0;
  for (int i = 0; i < 400; ++i) {  // heartbeats every 250 ms for 100 s
    const int64_t seq = fence.NextSeq();
    if (pending != 0) fence.OnRenewed(pending);  // answered 250 ms later
    pending = seq;
    clock.Advance(absl::Milliseconds(250));
    ASSERT_FALSE(fence.FenceDue()) << "at heartbeat " << i;
  }
}

TEST(LeaseFenceTest, OldSequenceNumbersAreForgotten) {
  FakeClock clock;
  LeaseFence fence(absl::Seconds(5), &clock);
  const int64_t first = fence.NextSeq();
  for (int i = 0; i < 300; ++i) fence.NextSeq();
  fence.OnRenewed(first);
  EXPECT_FALSE(fence.armed());
}

// The fencing argument, checked on random timelines: one-way delays up to
// 1.5 s (far beyond a healthy network: the agent may well fence for nothing),
// renewals rationed by the server's own rule (NextLeaseRenewal), the server's
// loss of the node once a SilentLossTimeout passes without a receipt (after
// which it renews nothing), and the agent's heartbeats stopping at a random
// time (the cut). Workers start only under a lease that is not about to end.
// Whenever the server loses the node, the agent has killed
// its workers (fence + grace) no later. Heartbeats at the default 250 ms and
// at lease/4, the longest the heartbeat budget lets an agent follow.
TEST(LeaseFenceTest, TheAgentKillsItsWorkersBeforeTheServerLosesTheNode) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> delay_ms(0, 1500);
  int fenced_before_loss = 0;
  struct Case {
    int lease_s;
    bool budget;  // heartbeats every lease/4, not 250 ms
  };
  for (Case c : {Case{1, false}, Case{2, false}, Case{5, false}, Case{2, true},
                 Case{5, true}}) {
    const absl::Duration lease = absl::Seconds(c.lease_s);
    const absl::Duration interval =
        c.budget ? lease / 4 : absl::Milliseconds(250);
    const absl::Duration silent =
        rendezvous::SilentLossTimeout(absl::Seconds(1), lease);
    for (int trial = 0; trial < 200; ++trial) {
      FakeClock clock;
      LeaseFence fence(lease, &clock);
      const absl::Time start = clock.Now();
      const int beats = 10 + trial % 40;
      struct Beat {
        int64_t seq;
        absl::Time receipt;      // InfinitePast once received
        absl::Time ack_arrival;  // InfiniteFuture: no ack (yet)
      };
      std::vector<Beat> inflight;
      absl::Time last_receipt = start;  // the Join
      absl::Time renewal_due = start;
      absl::Time lost_at = absl::InfiniteFuture();
      absl::Time kill_at = absl::InfiniteFuture();
      absl::Time next_send = start;
      int sent = 0;
      bool ran = false;
      while (clock.Now() < start + absl::Seconds(200) &&
             (lost_at == absl::InfiniteFuture() ||
              (ran && kill_at == absl::InfiniteFuture()))) {
        const absl::Time now = clock.Now();
        if (lost_at == absl::InfiniteFuture() && now >= last_receipt + silent)
          lost_at = last_receipt + silent;
        if (sent < beats && now >= next_send) {
          inflight.push_back(Beat{fence.NextSeq(),
                                  now + absl::Milliseconds(delay_ms(rng)),
                                  absl::InfiniteFuture()});
          ++sent;
          next_send = now + interval;
        }
        for (Beat& b : inflight) {
          if (b.receipt != absl::InfinitePast() && b.receipt <= now) {
            // A lost node's late heartbeats renew nothing.
            if (lost_at == absl::InfiniteFuture()) {
              last_receipt = std::max(last_receipt, b.receipt);
              if (b.receipt >= renewal_due) {
                renewal_due =
                    rendezvous::NextLeaseRenewal(renewal_due, b.receipt, lease);
                b.ack_arrival = b.receipt + absl::Milliseconds(delay_ms(rng));
              }
            }
            b.receipt = absl::InfinitePast();
          }
          if (b.ack_arrival <= now) {
            fence.OnRenewed(b.seq);
            b.ack_arrival = absl::InfiniteFuture();
          }
        }
        // The agent starts its workers once armed with a lease that is not
        // about to end (ElasticAgent::OnRoundReady), and fences them.
        if (!ran && fence.armed() && !fence.FenceDue()) ran = true;
        if (ran && kill_at == absl::InfiniteFuture() && fence.FenceDue())
          kill_at = now + fence.FenceGrace();
        clock.Advance(absl::Milliseconds(10));
      }
      ASSERT_NE(lost_at, absl::InfiniteFuture());
      if (!ran) continue;  // no timely renewal ever came: nothing ran
      // 10 ms: the step of this simulation.
      EXPECT_LE(kill_at, lost_at + absl::Milliseconds(10))
          << "lease " << lease << " interval " << interval << " trial "
          << trial;
      fenced_before_loss += kill_at <= lost_at + absl::Milliseconds(10);
    }
  }
  EXPECT_GT(fenced_before_loss, 500);
}

}  // namespace
}  // namespace muster::agent
