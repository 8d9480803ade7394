// Lease fencing, the agent's side (agent/src/lease_fence.h), on a FakeClock,
// and the property both sides exist for: on any timeline of sends, receipts
// and renewals, the agent's workers are killed before the server could
// declare the silent node lost (rendezvous/src/core/lease.h).
#include "agent/src/lease_fence.h"

#include <cstdio>
#include <deque>
#include <random>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "muster/platform/clock.h"
#include "rendezvous/src/core/lease.h"

namespace muster::agent {
namespace {

// The leases and heartbeat intervals the random timelines below run (the
// default 250 ms, and lease/4: the longest the heartbeat budget lets an agent
// follow), with the silence after which the server loses the node.
struct TimelineCase {
  absl::Duration lease;
  absl::Duration interval;
  absl::Duration silent;
};
std::vector<TimelineCase> TimelineCases() {
  std::vector<TimelineCase> cases;
  auto add = [&](absl::Duration lease, absl::Duration interval) {
    cases.push_back({lease, interval,
                     rendezvous::SilentLossTimeout(absl::Seconds(1), lease)});
  };
  for (int s : {1, 2, 5}) add(absl::Seconds(s), absl::Milliseconds(250));
  for (int s : {2, 5}) add(absl::Seconds(s), absl::Seconds(s) / 4);
  return cases;
}

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
  for (const auto& [lease, interval, silent] : TimelineCases()) {
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

// The same argument with the rounds around it (musterd's rule: StreamLease in
// rendezvous/src/core/lease.h). The agent joins and waits for a round without
// workers, and musterd renews nothing meanwhile; a RoundReady renews the last
// seq musterd received (RoundReady.lease_seq); the agent starts its workers
// only under a lease that lasts lease/4, or else sends a heartbeat at once
// and waits up to 0.3 lease for its renewal (ElasticAgent::AwaitLease); the
// round may end (Restart: the workers stop, a rejoin without a seq, another
// wait, the next RoundReady); a fenced agent reconnects with a Join (a seq).
// An AwaitLease that fails reconnects (a Join with a seq). At a random time
// the network is cut both ways. Whenever the server loses the node, the
// workers of the round then running were killed no later, and none start
// after it (a RoundReady still in flight finds the lease over).
TEST(LeaseFenceTest, WaitingForRoundsAndRoundReadyRenewalsStillFenceInTime) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> delay_ms(0, 1500);
  std::uniform_real_distribution<double> unit(0, 1);
  int runs = 0, fallbacks = 0, fenced_after_cut = 0, running_at_loss = 0;
  int started_after_loss = 0;
  for (const auto& [lease, interval, silent] : TimelineCases()) {
    for (int trial = 0; trial < 200; ++trial) {
      FakeClock clock;
      LeaseFence fence(lease, &clock);
      const absl::Time start = clock.Now();
      const absl::Time cut = start + lease * (8 * unit(rng));
      // One TCP stream each way: in order, dropped once sent after the cut.
      struct Up {
        int64_t seq;  // 0: a rejoin without one
        bool join;
        absl::Time at;
      };
      enum class Kind { kRenewed, kReady, kRestart };
      struct Down {
        Kind kind;
        int64_t seq;
        absl::Time at;
      };
      std::deque<Up> up;
      std::deque<Down> down;
      auto delay = [&](absl::Time last) {
        return std::max(last, clock.Now() + absl::Milliseconds(delay_ms(rng)));
      };
      auto send_up = [&](int64_t seq, bool join) {
        if (clock.Now() < cut)
          up.push_back({seq, join, delay(up.empty() ? start : up.back().at)});
      };
      auto send_down = [&](Kind kind, int64_t seq) {
        if (clock.Now() < cut)
          down.push_back(
              {kind, seq, delay(down.empty() ? start : down.back().at)});
      };
      // (lease copied: clang before 16 cannot capture a structured binding.)
      auto round_wait = [&, lease = lease] { return lease * (2 * unit(rng)); };
      // musterd's side.
      rendezvous::StreamLease sl;
      sl.lease_ms = absl::ToInt64Milliseconds(lease);
      absl::Time last_receipt = start;
      absl::Time lost_at = absl::InfiniteFuture();
      absl::Time ready_at = absl::InfiniteFuture();
      absl::Time restart_at = absl::InfiniteFuture();
      // The agent's.
      bool running = false;
      bool was_running_at_loss = false;
      absl::Time kill_at = absl::InfiniteFuture();     // of the running workers
      absl::Time stopped_at = absl::InfiniteFuture();  // of the last ones
      absl::Time await_until = absl::InfiniteFuture();  // AwaitLease
      absl::Time next_beat = start + interval;
      send_up(fence.NextSeq(), true);
      // On past the loss until the workers stop and whatever was in flight
      // has arrived.
      while (clock.Now() < start + absl::Seconds(300) &&
             (lost_at == absl::InfiniteFuture() || running ||
              clock.Now() < lost_at + absl::Seconds(4))) {
        const absl::Time now = clock.Now();
        if (lost_at == absl::InfiniteFuture() && now >= last_receipt + silent) {
          lost_at = last_receipt + silent;
          was_running_at_loss = running;
          running_at_loss += running;
        }
        const bool alive = lost_at == absl::InfiniteFuture();
        if (now >= next_beat) {
          send_up(fence.NextSeq(), false);
          next_beat = now + interval;
        }
        while (!up.empty() && up.front().at <= now) {
          const Up u = up.front();
          up.pop_front();
          if (!alive) continue;  // a lost node renews nothing
          last_receipt = std::max(last_receipt, u.at);
          if (u.join) {  // Coordinator::Impl::OnJoin
            sl.in_round = false;
            if (u.seq != 0) {
              sl.last_seq = u.seq;
              sl.due = rendezvous::FirstLeaseRenewal(u.at, lease);
            }
            restart_at = absl::InfiniteFuture();
            ready_at = now + round_wait();
          } else if (sl.OnHeartbeat(u.seq, now)) {
            send_down(Kind::kRenewed, u.seq);
          }
        }
        if (alive && now >= ready_at) {  // the round forms
          sl.in_round = true;
          send_down(Kind::kReady, sl.last_seq.Get());
          ready_at = absl::InfiniteFuture();
          restart_at = now + lease * (3 * unit(rng));
        }
        if (alive && now >= restart_at) {  // and ends
          sl.in_round = false;
          send_down(Kind::kRestart, 0);
          restart_at = absl::InfiniteFuture();
        }
        auto start_workers = [&] {
          running = true;
          kill_at = absl::InfiniteFuture();
          await_until = absl::InfiniteFuture();
          ++runs;
          started_after_loss += !alive;
        };
        while (!down.empty() && down.front().at <= now) {
          const Down d = down.front();
          down.pop_front();
          if (d.kind == Kind::kRestart) {
            if (running) stopped_at = now;  // stopped, not fenced
            running = false;
            await_until = absl::InfiniteFuture();
            send_up(0, true);  // a rejoin
            continue;
          }
          fence.OnRenewed(d.seq);  // LeaseRenewed, or RoundReady.lease_seq
          if (d.kind != Kind::kReady || running) continue;
          if (fence.LastsFor(lease / 4)) {
            start_workers();
          } else {
            ++fallbacks;
            send_up(fence.NextSeq(), false);  // a heartbeat at once
            next_beat = now + interval;
            await_until = now + lease * 3 / 10;
          }
        }
        if (await_until != absl::InfiniteFuture()) {
          if (fence.LastsFor(lease / 4)) {
            start_workers();
          } else if (now >= await_until) {
            await_until = absl::InfiniteFuture();
            // As before: a lease not yet due to fence will do; else the
            // agent fences and reconnects (fence_pending_).
            if (!fence.armed() || !fence.FenceDue()) {
              start_workers();
            } else {
              send_up(fence.NextSeq(), true);
            }
          }
        }
        if (running && kill_at == absl::InfiniteFuture() && fence.FenceDue())
          kill_at = now + fence.FenceGrace();
        if (running && now >= kill_at) {
          running = false;  // fenced: the agent reconnects
          stopped_at = kill_at;
          fenced_after_cut += kill_at > cut;
          send_up(fence.NextSeq(), true);
        }
        clock.Advance(absl::Milliseconds(10));
      }
      ASSERT_NE(lost_at, absl::InfiniteFuture());
      ASSERT_FALSE(running) << "workers never fenced; trial " << trial;
      if (!was_running_at_loss) continue;
      // 10 ms: the step of this simulation.
      EXPECT_LE(stopped_at, lost_at + absl::Milliseconds(10))
          << "lease " << lease << " interval " << interval << " trial "
          << trial;
    }
  }
  EXPECT_EQ(started_after_loss, 0);
  // Not vacuous: rounds ran, some after a fallback, and many were running
  // when the cut came and were fenced (before the loss: checked above).
  std::printf(
      "runs %d, fallbacks %d, fenced after the cut %d, running at the loss "
      "%d\n",
      runs, fallbacks, fenced_after_cut, running_at_loss);
  EXPECT_GT(runs, 500);
  EXPECT_GT(fallbacks, 100);
  EXPECT_GT(fenced_after_cut, 100);
}

}  // namespace
}  // namespace muster::agent
