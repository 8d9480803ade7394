// The watchdog's reading of progress files: libmuster_comm's format
// (updated_unix_ms, which a memory-mapped update does not reflect in the mtime)
// and a plain touched file.
#include "agent/src/watchdog.h"

#include <sys/stat.h>
#include <utime.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace muster::agent {
namespace {

void SetMtime(const std::string& path, absl::Time t) {
  utimbuf times{absl::ToTimeT(t), absl::ToTimeT(t)};
  ASSERT_EQ(utime(path.c_str(), &times), 0);
}

TEST(WatchdogTest, ReadsUpdatedTimeFromTheCommFormat) {
  const std::string path = testing::MakeTempDir("wd") + "/progress";
  const absl::Time old = absl::FromUnixSeconds(1'700'000'000);
  const absl::Time updated = old + absl::Minutes(5);
  std::ofstream(path) << "muster-progress 1\npid 0000001234\n"
                      << absl::StrFormat("updated_unix_ms %016d\n",
                                         absl::ToUnixMillis(updated))
                      << "started 00000000000000000042\n";
  SetMtime(path, old);
  auto last = LastProgress(path);
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(*last, updated);
  EXPECT_FALSE(LastProgress(path + ".missing").has_value());
}

TEST(WatchdogTest, PlainFilesCountByMtimeAndSilentRanksAreReportedOnce) {
  const std::string dir = testing::MakeTempDir("wd2");
  const absl::Time start = absl::FromUnixSeconds(1'700'000'000);
  std::ofstream(dir + "/0") << "touched";
  SetMtime(dir + "/0", start + absl::Seconds(50));
  // Rank 1 never wrote its file: measured from the start.
  Watchdog dog(absl::Seconds(30), {dir + "/0", dir + "/1"}, start);
  EXPECT_TRUE(dog.Check(start + absl::Seconds(20)).empty());
  EXPECT_EQ(dog.Check(start + absl::Seconds(31)), std::vector<int>{1});
  EXPECT_TRUE(dog.Check(start + absl::Seconds(40)).empty()) << "reported twice";
  EXPECT_EQ(dog.Check(start + absl::Seconds(81)), std::vector<int>{0});
  EXPECT_EQ(dog.Silence(0, start + absl::Seconds(60)), absl::Seconds(10));
}

// The heartbeat carries each readable format-2 file's speed counters, with
// its global rank; a format-1 or touched file gives none; progress_age_ms only
// when silence is reported (--worker-timeout).
TEST(NodeProgressTest, HeartbeatsCarryTheSpeedCountersOfFormatTwoFiles) {
  const std::string dir = testing::MakeTempDir("np");
  std::ofstream(dir + "/0") << "muster-progress 2\npid 0000001234\n"
                            << "updated_unix_ms 0001763456789012\n"
                            << "started 00000000000000000043\n"
                            << "finished 00000000000000000042\n"
                            << "compute_us 0000000000123456\n"
                            << "wait_us 0000000000007890\n";
  std::ofstream(dir + "/1") << "muster-progress 1\npid 0000001235\n"
                            << "finished 00000000000000000042\n";
  std::ofstream(dir + "/2") << "touched";
  FakeClock clock;
  NodeProgress progress(&clock);
  progress.Watch(7, /*rank_offset=*/4, {dir + "/0", dir + "/1", dir + "/2"},
                 clock.Now(), /*report_silence=*/false);
  v1::Heartbeat heartbeat;
  heartbeat.set_round(7);
  progress.Fill(&heartbeat);
  ASSERT_EQ(heartbeat.speeds_size(), 1) << heartbeat.DebugString();
  EXPECT_EQ(heartbeat.speeds(0).rank(), 4);
  EXPECT_EQ(heartbeat.speeds(0).collectives(), 42u);
  EXPECT_EQ(heartbeat.speeds(0).compute_us(), 123456u);
  EXPECT_EQ(heartbeat.speeds(0).wait_us(), 7890u);
  EXPECT_FALSE(heartbeat.has_progress_age_ms());

  // Another round's heartbeat gets nothing; silence is reported when asked.
  v1::Heartbeat stale;
  stale.set_round(6);
  progress.Fill(&stale);
  EXPECT_EQ(stale.speeds_size(), 0);
  progress.Watch(8, 0, {dir + "/0"}, clock.Now(), /*report_silence=*/true);
  v1::Heartbeat timed;
  timed.set_round(8);
  progress.Fill(&timed);
  EXPECT_TRUE(timed.has_progress_age_ms());
  EXPECT_EQ(timed.speeds_size(), 1);
  EXPECT_EQ(timed.speeds(0).rank(), 0);
}

}  // namespace
}  // namespace muster::agent
