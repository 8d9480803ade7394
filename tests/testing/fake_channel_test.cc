#include "tests/testing/fake_channel.h"

#include "gtest/gtest.h"

namespace muster::testing {
namespace {

v1::ServerMessage Waiting() {
  v1::ServerMessage m;
  m.mutable_waiting();
  return m;
}

TEST(FakeChannelTest, RecordsUntilClosedThenDropsAndCounts) {
  FakeChannel ch;
  EXPECT_EQ(ch.last().kind_case(), v1::ServerMessage::KIND_NOT_SET);
  ch.Send(Waiting());
  ch.Send(Waiting());
  EXPECT_EQ(ch.size(), 2u);
  EXPECT_EQ(ch.count(v1::ServerMessage::kWaiting), 2);
  EXPECT_EQ(ch.last().kind_case(), v1::ServerMessage::kWaiting);
  EXPECT_FALSE(ch.closed().has_value());

  ch.Close(absl::AbortedError("first"));
  ch.Close(absl::InternalError("second"));
  ch.Send(Waiting());
  EXPECT_EQ(ch.size(), 2u);
  EXPECT_EQ(ch.sends_after_close(), 1);
  EXPECT_EQ(ch.close_calls(), 2);
  ASSERT_TRUE(ch.closed().has_value());
  EXPECT_EQ(ch.closed()->code(), absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace muster::testing
