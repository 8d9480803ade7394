// The Coordinator's progress watch (issue 28): a job that set
// --worker-timeout (Join.worker_timeout_ms) gets CaptureHang on every member
// once every member's latest heartbeat says none of its workers progressed
// for that long, and only then: once per round, not for a node still
// progressing, not on progress of another round, not for jobs without the
// timeout. A FakeClock drives Tick; no sockets, no sleeps.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/platform/clock.h"
#include "muster/rendezvous/coordinator.h"
#include "tests/testing/join.h"

namespace muster::rendezvous {
namespace {

using ::testing::HasSubstr;

class RecordingChannel : public AgentChannel {
 public:
  void Send(const v1::ServerMessage& msg) override {
    absl::MutexLock lock(&mu_);
    sent_.push_back(msg);
  }
  void Close(const absl::Status&) override {}
  std::vector<v1::ServerMessage> sent() {
    absl::MutexLock lock(&mu_);
    return sent_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::ServerMessage> sent_;
};

std::optional<v1::RoundReady> LastReady(RecordingChannel& c) {
  std::optional<v1::RoundReady> ready;
  for (const auto& m : c.sent()) {
    if (m.has_round_ready()) ready = m.round_ready();
  }
  return ready;
}

std::vector<v1::CaptureHang> Hangs(RecordingChannel& c) {
  std::vector<v1::CaptureHang> hangs;
  for (const auto& m : c.sent()) {
    if (m.has_capture_hang()) hangs.push_back(m.capture_hang());
  }
  return hangs;
}

class CoordinatorProgressTest : public ::testing::Test {
 protected:
  // a and b form round 1 of job `job` (two nodes, two workers each).
  void FormRound(const std::string& job, int64_t worker_timeout_ms) {
    for (int i = 0; i < 2; ++i) {
      v1::Join j =
          muster::testing::MakeJoin({.job_id = job,
                                     .node_id = std::string(1, 'a' + i),
                                     .local_world_size = 2,
                                     .min_nodes = 2,
                                     .max_nodes = 2,
                                     .master_port = 5000});
      j.set_worker_timeout_ms(worker_timeout_ms);
      ASSERT_TRUE(coordinator_.OnJoin(i + 1, j, ch_[i]).ok());
    }
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(LastReady(*ch_[i]).has_value());
    round_ = LastReady(*ch_[0])->round();
  }
  // Node i's heartbeat: none of its workers of `round` progressed for
  // `silent_ms` (unset when negative).
  void Beat(int i, int64_t silent_ms, int64_t round = -1) {
    v1::Heartbeat hb;
    hb.set_round(round < 0 ? round_ : round);
    if (silent_ms >= 0) hb.set_progress_age_ms(silent_ms);
    coordinator_.OnHeartbeat(i + 1, hb);
  }
  // The next read of the members' progress (every 250 ms).
  void TickLater() {
    clock_.Advance(absl::Milliseconds(300));
    coordinator_.Tick();
  }

  FakeClock clock_;
  Coordinator coordinator_{{}, &clock_};
  std::shared_ptr<RecordingChannel> ch_[2] = {
      std::make_shared<RecordingChannel>(),
      std::make_shared<RecordingChannel>()};
  int64_t round_ = 0;
};

TEST_F(CoordinatorProgressTest, EveryMemberSilentForTheTimeoutGetsCaptureHang) {
  FormRound("hung", 3000);
  EXPECT_TRUE(LastReady(*ch_[0])->progress_watched());
  Beat(0, 3500);
  Beat(1, 1000);  // b's workers progressed a second ago
  TickLater();
  EXPECT_TRUE(Hangs(*ch_[0]).empty());
  EXPECT_TRUE(Hangs(*ch_[1]).empty());
  Beat(1, 3000);  // now b is silent for the timeout too
  TickLater();
  for (auto& ch : ch_) {
    const std::vector<v1::CaptureHang> hangs = Hangs(*ch);
    ASSERT_EQ(hangs.size(), 1u);
    EXPECT_EQ(hangs[0].round(), round_);
    EXPECT_THAT(hangs[0].reason(),
                HasSubstr("musterd saw no progress from any rank of job hung "
                          "for 3s (--worker-timeout)"));
  }
  // Once per round.
  Beat(0, 9000);
  Beat(1, 9000);
  TickLater();
  TickLater();
  EXPECT_EQ(Hangs(*ch_[0]).size(), 1u);
  EXPECT_EQ(Hangs(*ch_[1]).size(), 1u);
}

TEST_F(CoordinatorProgressTest, ReadsProgressAtMostEveryQuarterSecond) {
  FormRound("paced", 3000);
  Beat(0, 100);
  Beat(1, 100);
  TickLater();  // read: both progress
  Beat(0, 3000);
  Beat(1, 3000);
  clock_.Advance(absl::Milliseconds(100));
  const absl::Time next = coordinator_.Tick();  // too soon for another read
  EXPECT_TRUE(Hangs(*ch_[0]).empty());
  EXPECT_LE(next, clock_.Now() + absl::Milliseconds(250));
  clock_.Advance(next - clock_.Now());
  coordinator_.Tick();
  EXPECT_EQ(Hangs(*ch_[0]).size(), 1u);
}

TEST_F(CoordinatorProgressTest, NothingIsDecidedWithoutEveryMembersWord) {
  FormRound("partial", 3000);
  Beat(0, 5000);
  Beat(1, -1);  // b reports no progress (no workers watched yet)
  TickLater();
  Beat(1, 5000, round_ - 1);  // a stale round's silence does not count
  TickLater();
  EXPECT_TRUE(Hangs(*ch_[0]).empty());
  EXPECT_TRUE(Hangs(*ch_[1]).empty());
}

TEST_F(CoordinatorProgressTest, JobsWithoutWorkerTimeoutAreNotWatched) {
  FormRound("unwatched", 0);
  EXPECT_FALSE(LastReady(*ch_[0])->progress_watched());
  Beat(0, 600000);
  Beat(1, 600000);
  TickLater();
  EXPECT_TRUE(Hangs(*ch_[0]).empty());
  EXPECT_TRUE(Hangs(*ch_[1]).empty());
}

TEST_F(CoordinatorProgressTest, MembersThatSucceededDoNotHoldTheDecision) {
  FormRound("finishing", 3000);
  v1::WorkersSucceeded ok;
  ok.set_round(round_);
  coordinator_.OnWorkersSucceeded(1, ok);  // a is done; b hangs
  Beat(1, 4000);
  TickLater();
  EXPECT_TRUE(Hangs(*ch_[0]).empty()) << "a has no workers left to report";
  EXPECT_EQ(Hangs(*ch_[1]).size(), 1u);
}

}  // namespace
}  // namespace muster::rendezvous
