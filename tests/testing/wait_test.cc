#include "tests/testing/wait.h"

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace muster::testing {
namespace {

TEST(WaitUntilTest, ReturnsAtOnceWhenTheConditionHolds) {
  int calls = 0;
  const absl::Time start = absl::Now();
  EXPECT_TRUE(WaitUntil([&] { return ++calls > 0; }, absl::Seconds(30)));
  EXPECT_EQ(calls, 1);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(WaitUntilTest, SeesAConditionAnotherThreadMakesTrue) {
  std::atomic<bool> flag{false};
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    flag = true;
  });
  EXPECT_TRUE(WaitUntil([&] { return flag.load(); }, absl::Seconds(30)));
  setter.join();
}

TEST(WaitUntilTest, GivesUpAfterTheTimeoutAndPollsMeanwhile) {
  int calls = 0;
  const absl::Time start = absl::Now();
  EXPECT_FALSE(WaitUntil(
      [&] {
        ++calls;
        return false;
      },
      absl::Milliseconds(200), absl::Milliseconds(10)));
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(200));
  EXPECT_LT(took, absl::Seconds(10));  // a loaded machine: big room
  EXPECT_GE(calls, 2);  // polled, then checked once more at the deadline
}

TEST(WaitUntilTest, AConditionTrueOnlyAtTheDeadlineCounts) {
  // With a zero timeout the loop does not run; the last check still does.
  int calls = 0;
  EXPECT_TRUE(WaitUntil([&] { return ++calls == 1; }, absl::ZeroDuration()));
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace muster::testing
