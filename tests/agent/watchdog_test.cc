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

}  // namespace
}  // namespace muster::agent
