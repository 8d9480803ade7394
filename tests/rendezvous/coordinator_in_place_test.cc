// The Coordinator under --recovery=in-place (issue 26): nodes that keep their
// workers (Join.kept) come first in the next round, in their previous order,
// ranks compacted; nodes that start new workers come after them, survivors
// of a worker failure included; the round forms as soon as every survivor is
// back. Without in-place the order is today's (survivors keep their places).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "muster/platform/clock.h"
#include "muster/rendezvous/coordinator.h"
#include "tests/testing/fake_channel.h"
#include "tests/testing/join.h"

namespace muster::rendezvous {
namespace {

// What the Coordinator sent each agent.
using RecordingChannel = ::muster::testing::FakeChannel;

std::optional<v1::RoundReady> LastReady(RecordingChannel& c) {
  std::optional<v1::RoundReady> ready;
  for (const auto& m : c.messages()) {
    if (m.has_round_ready()) ready = m.round_ready();
  }
  return ready;
}

bool GotRestart(RecordingChannel& c) {
  for (const auto& m : c.messages()) {
    if (m.has_restart()) return true;
  }
  return false;
}

class CoordinatorInPlaceTest : public ::testing::Test {
 protected:
  v1::Join Join(const std::string& node, bool in_place) {
    v1::Join j = muster::testing::MakeJoin({.job_id = "inplace",
                                            .node_id = node,
                                            .hostname = "host-" + node,
                                            .advertised_addr = "10.0.0.1",
                                            .local_world_size = 2,
                                            .min_nodes = 1,
                                            .max_nodes = 3,
                                            .master_port = 5000});
    j.set_max_restarts(3);
    j.set_recovery_in_place(in_place);
    return j;
  }
  // A Join that keeps the workers of the round `ready` describes.
  v1::Join Keep(const std::string& node, const v1::RoundReady& ready) {
    v1::Join j = Join(node, true);
    j.mutable_kept()->set_round(ready.round());
    j.mutable_kept()->set_group_rank(ready.group_rank());
    j.mutable_kept()->set_rank_offset(ready.rank_offset());
    return j;
  }
  // a, b, c join (in that order) and form round 1 after last call.
  void FormFirstRound(bool in_place) {
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(
          coordinator_
              .OnJoin(i + 1, Join(std::string(1, 'a' + i), in_place), ch_[i])
              .ok());
    }
    for (int i = 0; i < 3; ++i) {
      auto ready = LastReady(*ch_[i]);
      ASSERT_TRUE(ready.has_value());
      ASSERT_EQ(ready->group_rank(), i);
      ASSERT_EQ(ready->world_size(), 6);
    }
  }
  // b's worker fails in the current round: every member hears Restart.
  void FailWorkerOnB() {
    const int64_t round = LastReady(*ch_[1])->round();
    v1::WorkersFailed failed;
    failed.set_round(round);
    v1::WorkerFailure* f = failed.add_failures();
    f->set_node_id("b");
    f->set_local_rank(0);
    f->set_global_rank(2);
    f->set_exit_code(1);
    coordinator_.OnWorkersFailed(2, failed);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(GotRestart(*ch_[i]));
  }

  FakeClock clock_;
  Coordinator coordinator_{{}, &clock_};
  std::shared_ptr<RecordingChannel> ch_[3] = {
      std::make_shared<RecordingChannel>(),
      std::make_shared<RecordingChannel>(),
      std::make_shared<RecordingChannel>()};
};

TEST_F(CoordinatorInPlaceTest, KeepersComeFirstInTheirOrderThenNewcomers) {
  FormFirstRound(/*in_place=*/true);
  const v1::RoundReady a1 = *LastReady(*ch_[0]);
  const v1::RoundReady c1 = *LastReady(*ch_[2]);
  FailWorkerOnB();
  // c is back first, then b (new workers), then a: the order is by the
  // previous ranks of the keepers, then the newcomers.
  ASSERT_TRUE(coordinator_.OnJoin(3, Keep("c", c1), ch_[2]).ok());
  ASSERT_TRUE(coordinator_.OnJoin(2, Join("b", true), ch_[1]).ok());
  EXPECT_EQ(LastReady(*ch_[0])->round(), a1.round());  // not formed yet
  ASSERT_TRUE(coordinator_.OnJoin(1, Keep("a", a1), ch_[0]).ok());
  // Every survivor is back (at max here too): the round forms at once.
  const v1::RoundReady a2 = *LastReady(*ch_[0]);
  const v1::RoundReady b2 = *LastReady(*ch_[1]);
  const v1::RoundReady c2 = *LastReady(*ch_[2]);
  EXPECT_EQ(a2.round(), a1.round() + 1);
  EXPECT_EQ(a2.group_rank(), 0);
  EXPECT_EQ(a2.rank_offset(), 0);
  EXPECT_EQ(c2.group_rank(), 1);
  EXPECT_EQ(c2.rank_offset(), 2);
  EXPECT_EQ(b2.group_rank(), 2);
  EXPECT_EQ(b2.rank_offset(), 4);
  EXPECT_EQ(a2.world_size(), 6);
  EXPECT_EQ(a2.restart_count(), 1);  // a worker failure counts
}

TEST_F(CoordinatorInPlaceTest, ALostNodeCompactsTheKeepersAtOnce) {
  FormFirstRound(/*in_place=*/true);
  const v1::RoundReady b1 = *LastReady(*ch_[1]);
  const v1::RoundReady c1 = *LastReady(*ch_[2]);
  coordinator_.OnDisconnect(1);  // a is lost
  ASSERT_TRUE(GotRestart(*ch_[1]));
  ASSERT_TRUE(coordinator_.OnJoin(3, Keep("c", c1), ch_[2]).ok());
  ASSERT_TRUE(coordinator_.OnJoin(2, Keep("b", b1), ch_[1]).ok());
  // No last call: both survivors are back and 2 is within 1..3.
  const v1::RoundReady b2 = *LastReady(*ch_[1]);
  const v1::RoundReady c2 = *LastReady(*ch_[2]);
  EXPECT_EQ(b2.round(), b1.round() + 1);
  EXPECT_EQ(b2.group_rank(), 0);
  EXPECT_EQ(b2.rank_offset(), 0);
  EXPECT_EQ(c2.group_rank(), 1);
  EXPECT_EQ(c2.rank_offset(), 2);
  EXPECT_EQ(c2.world_size(), 4);
  EXPECT_EQ(c2.restart_count(), 0);  // a lost node uses no restart
}

TEST_F(CoordinatorInPlaceTest, RestartModeKeepsTodaysOrder) {
  FormFirstRound(/*in_place=*/false);
  FailWorkerOnB();
  ASSERT_TRUE(coordinator_.OnJoin(3, Join("c", false), ch_[2]).ok());
  ASSERT_TRUE(coordinator_.OnJoin(2, Join("b", false), ch_[1]).ok());
  ASSERT_TRUE(coordinator_.OnJoin(1, Join("a", false), ch_[0]).ok());
  // Survivors keep their places: a, b, c.
  EXPECT_EQ(LastReady(*ch_[0])->group_rank(), 0);
  EXPECT_EQ(LastReady(*ch_[1])->group_rank(), 1);
  EXPECT_EQ(LastReady(*ch_[2])->group_rank(), 2);
}

}  // namespace
}  // namespace muster::rendezvous
