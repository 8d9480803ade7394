// muster::ParseDuration and DurationRange: the one duration parser of the
// tree (launcher flags, rdzv-conf, musterd, doctor).
#include "muster/common/duration.h"

#include <string>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace muster {
namespace {

using ::testing::HasSubstr;

TEST(ParseDurationTest, SecondsAsTorchrunWritesThem) {
  EXPECT_EQ(*ParseDuration("30"), absl::Seconds(30));
  EXPECT_EQ(*ParseDuration("0.5"), absl::Milliseconds(500));
  EXPECT_EQ(*ParseDuration("1e-3"), absl::Milliseconds(1));
  EXPECT_EQ(*ParseDuration("0"), absl::ZeroDuration());
  EXPECT_EQ(*ParseDuration(" 2 "), absl::Seconds(2));
}

TEST(ParseDurationTest, DurationsWithUnits) {
  EXPECT_EQ(*ParseDuration("500ms"), absl::Milliseconds(500));
  EXPECT_EQ(*ParseDuration("2m"), absl::Minutes(2));
  EXPECT_EQ(*ParseDuration("1m30s"), absl::Seconds(90));
  EXPECT_EQ(*ParseDuration("1.5h"), absl::Minutes(90));
  EXPECT_EQ(*ParseDuration("\t250us\n"), absl::Microseconds(250));
}

TEST(ParseDurationTest, RefusesWhatIsNoDuration) {
  for (const char* bad : {"", " ", "abc", "soon", "-1", "-2s", "nan", "inf",
                          "-inf", "1x", "s", "5 s", "1,5"}) {
    absl::StatusOr<absl::Duration> d = ParseDuration(bad);
    ASSERT_FALSE(d.ok()) << "'" << bad << "' parsed as " << *d;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(d.status().message(), HasSubstr("expected seconds (30, 0.5)"));
  }
}

TEST(ParseDurationTest, AHugeNumberSaturatesAndAFiniteMaxRefusesIt) {
  EXPECT_EQ(*ParseDuration("1e300"), absl::InfiniteDuration());
  const DurationRange week = {absl::Milliseconds(10), absl::Hours(24 * 7)};
  EXPECT_EQ(ParseDurationInRange("1e300", week).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST(DurationRangeTest, BoundsAreInclusiveAndZeroIsOptional) {
  const DurationRange r = {absl::Milliseconds(10), absl::Seconds(60)};
  EXPECT_TRUE(r.Contains(absl::Milliseconds(10)));
  EXPECT_TRUE(r.Contains(absl::Seconds(60)));
  EXPECT_FALSE(r.Contains(absl::Milliseconds(9)));
  EXPECT_FALSE(r.Contains(absl::Seconds(61)));
  EXPECT_FALSE(r.Contains(absl::ZeroDuration()));
  DurationRange zero_ok = r;
  zero_ok.zero_ok = true;
  EXPECT_TRUE(zero_ok.Contains(absl::ZeroDuration()));
  EXPECT_FALSE(zero_ok.Contains(absl::Milliseconds(5)));
  // The default range: anything parsed.
  EXPECT_TRUE(DurationRange{}.Contains(absl::ZeroDuration()));
  EXPECT_TRUE(DurationRange{}.Contains(absl::InfiniteDuration()));
}

TEST(DurationRangeTest, DescribeSaysWhatIsAccepted) {
  EXPECT_EQ(
      (DurationRange{absl::Milliseconds(10), absl::Seconds(60)}).Describe(),
      "seconds from 10ms to 1m");
  EXPECT_EQ((DurationRange{absl::Milliseconds(10), absl::Hours(168), true})
                .Describe(),
            "0 or seconds from 10ms to 168h");
  EXPECT_EQ(DurationRange{}.Describe(), "seconds >= 0");
}

TEST(ParseDurationInRangeTest, SyntaxAndRangeHaveTheirOwnCodes) {
  const DurationRange r = {absl::Milliseconds(1), absl::Hours(1)};
  EXPECT_EQ(*ParseDurationInRange("0.1", r), absl::Milliseconds(100));
  EXPECT_EQ(*ParseDurationInRange("1h", r), absl::Hours(1));
  EXPECT_EQ(ParseDurationInRange("x", r).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<absl::Duration> low = ParseDurationInRange("1e-9", r);
  ASSERT_FALSE(low.ok());
  EXPECT_EQ(low.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(low.status().message(),
            "out of range: expected seconds from 1ms to 1h");
  EXPECT_EQ(ParseDurationInRange("2h", r).status().code(),
            absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace muster
