// StragglerTracker: the speed score (median compute time per collective over
// own, capped at 1), the threshold with its hysteresis, what too little data
// scores (nothing), and the reset between rounds. Times are given: no clock.
#include "rendezvous/src/core/straggler_tracker.h"

#include <vector>

#include "gtest/gtest.h"

namespace muster::rendezvous {
namespace {

constexpr absl::Time kStart = absl::FromUnixSeconds(1'700'000'000);

// Feeds `seconds` of heartbeats (one a second) of four ranks, rank r
// computing compute_ms[r] per collective at ten collectives a second, from
// cumulative counters `base`.
void Feed(StragglerTracker& t, const std::vector<double>& compute_ms,
          int from_s, int seconds) {
  for (int s = from_s; s <= from_s + seconds; ++s) {
    for (size_t r = 0; r < compute_ms.size(); ++r) {
      const uint64_t coll = 10ull * s;
      t.Add(static_cast<int>(r), "n" + std::to_string(r), "h", coll,
            static_cast<uint64_t>(coll * compute_ms[r] * 1000),
            kStart + absl::Seconds(s));
    }
  }
}

TEST(StragglerTrackerTest, AHalfSpeedRankScoresAboutHalfAndIsNamed) {
  StragglerTracker t({.threshold = 0.7, .window = absl::Seconds(20)});
  t.StartRound(1);
  Feed(t, {10, 10, 20, 10}, 0, 20);
  const std::vector<StragglerChange> changes =
      t.Evaluate(kStart + absl::Seconds(20));
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_TRUE(changes[0].became);
  EXPECT_EQ(changes[0].rank.rank, 2);
  EXPECT_EQ(changes[0].rank.node_id, "n2");
  EXPECT_NEAR(changes[0].rank.score, 0.5, 0.01);
  ASSERT_EQ(t.Stragglers().size(), 1u);
  EXPECT_EQ(t.Stragglers()[0].since, kStart + absl::Seconds(20));
  // The others are as fast as the median.
  EXPECT_DOUBLE_EQ(t.scores().at(0).score, 1.0);
}

TEST(StragglerTrackerTest, EightyPercentIsNotAStragglerAtSeventy) {
  StragglerTracker t({.threshold = 0.7, .window = absl::Seconds(20)});
  t.StartRound(1);
  Feed(t, {10, 12.5, 10, 10}, 0, 20);
  EXPECT_TRUE(t.Evaluate(kStart + absl::Seconds(20)).empty());
  EXPECT_NEAR(t.scores().at(1).score, 0.8, 0.01);
  EXPECT_TRUE(t.Stragglers().empty());
}

TEST(StragglerTrackerTest, AStragglerRecoversOnlyAboveThresholdPlusATenth) {
  StragglerTracker t({.threshold = 0.7, .window = absl::Seconds(10)});
  t.StartRound(1);
  Feed(t, {10, 20, 10}, 0, 10);
  ASSERT_EQ(t.Evaluate(kStart + absl::Seconds(10)).size(), 1u);
  // Its counters go on at 0.75 of the median: still a straggler (< 0.8).
  std::vector<double> at75 = {10, 10 / 0.75, 10};
  for (int s = 11; s <= 30; ++s) {
    for (int r = 0; r < 3; ++r) {
      const uint64_t coll = 100 + 10ull * (s - 10);
      const uint64_t base = r == 1 ? 100 * 20'000 : 100 * 10'000;
      t.Add(r, "n" + std::to_string(r), "h", coll,
            base + static_cast<uint64_t>(10 * (s - 10) * at75[r] * 1000),
            kStart + absl::Seconds(s));
    }
  }
  EXPECT_TRUE(t.Evaluate(kStart + absl::Seconds(30)).empty());
  EXPECT_EQ(t.Stragglers().size(), 1u);
  EXPECT_EQ(t.Stragglers()[0].since, kStart + absl::Seconds(10));
}

TEST(StragglerTrackerTest, TooLittleDataScoresNothing) {
  StragglerTracker t({.threshold = 0.7, .window = absl::Seconds(20)});
  t.StartRound(1);
  // 2 s of samples: under a quarter of the window.
  Feed(t, {10, 30}, 0, 2);
  EXPECT_TRUE(t.Evaluate(kStart + absl::Seconds(2)).empty());
  EXPECT_TRUE(t.scores().empty());
  // One rank alone has nobody to be compared with.
  StragglerTracker one({.threshold = 0.7, .window = absl::Seconds(20)});
  one.StartRound(1);
  Feed(one, {30}, 0, 20);
  EXPECT_TRUE(one.Evaluate(kStart + absl::Seconds(20)).empty());
  EXPECT_TRUE(one.scores().empty());
}

TEST(StragglerTrackerTest, ANewRoundForgetsTheOldRanks) {
  StragglerTracker t({.threshold = 0.7, .window = absl::Seconds(20)});
  t.StartRound(1);
  Feed(t, {10, 20}, 0, 20);
  ASSERT_EQ(t.Evaluate(kStart + absl::Seconds(20)).size(), 1u);
  t.StartRound(2);
  EXPECT_TRUE(t.scores().empty());
  EXPECT_TRUE(t.Stragglers().empty());
  EXPECT_EQ(t.round(), 2);
}

}  // namespace
}  // namespace muster::rendezvous
