// The one adapter from Gloo's exceptions to absl::Status.
#include "comm/gloo/gloo_status.h"

#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "gloo/common/error.h"
#include "gloo/common/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace muster::comm::internal {
namespace {

using ::testing::HasSubstr;

template <typename E>
absl::Status Convert(E exception, GlooStage stage = GlooStage::kCollective,
                     const std::vector<std::string>& peers = {}) {
  return CallGloo(stage, "rank 0/3: AllReduce", peers,
                  [&] { throw exception; });
}

TEST(GlooStatusTest, NoExceptionIsOk) {
  EXPECT_TRUE(CallGloo(GlooStage::kCollective, "x", {}, [] {}).ok());
}

TEST(GlooStatusTest, PeerClosedIsAbortedAndNamesThePeer) {
  const std::vector<std::string> peers = {"", "[127.0.0.1]:4001",
                                          "[127.0.0.1]:4002"};
  absl::Status s =
      Convert(::gloo::IoException(
                  "[pair.cc:598] Connection closed by peer [127.0.0.1]:4002"),
              GlooStage::kCollective, peers);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(s.message(), HasSubstr("rank 0/3: AllReduce: "));
  EXPECT_THAT(s.message(), HasSubstr("Connection closed by peer"));
  EXPECT_THAT(s.message(), HasSubstr("(peer rank 2)"));
  // The accepting side sees the peer's ephemeral port: the host names the peer
  // when only one peer lives there...
  s = Convert(::gloo::IoException(
                  "Read error [10.0.0.2]:50001: Connection reset by peer"),
              GlooStage::kCollective,
              {"", "[10.0.0.2]:4001", "[10.0.0.3]:4002"});
  EXPECT_THAT(s.message(), HasSubstr("(peer rank 1)"));
  // ... and nobody when several do. A listening address that is a prefix of the
  // port in the message does not match either.
  s = Convert(::gloo::IoException(
                  "Read error [127.0.0.1]:40011: Connection reset by peer"),
              GlooStage::kCollective,
              {"", "[127.0.0.1]:4001", "[127.0.0.1]:4002"});
  EXPECT_THAT(s.message(), Not(HasSubstr("peer rank")));
  EXPECT_EQ(
      Convert(::gloo::IoException("Read error [x]: Connection reset by peer"))
          .code(),
      absl::StatusCode::kAborted);
}

TEST(GlooStatusTest, TimeoutsAreDeadlineExceeded) {
  for (const char* message :
       {"Timed out waiting 1000ms for recv operation to complete",
        "Connect timeout [x]", "Read timeout [x]",
        "Application timeout caused pair closure"}) {
    EXPECT_EQ(Convert(::gloo::IoException(message)).code(),
              absl::StatusCode::kDeadlineExceeded)
        << message;
  }
}

TEST(GlooStatusTest, OtherIoErrorsAreUnavailable) {
  absl::Status s =
      Convert(::gloo::IoException("connect [127.0.0.1]:1: Connection refused"));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), Not(HasSubstr("peer rank")));
}

TEST(GlooStatusTest, StoreErrorKeepsTheStoreStatus) {
  absl::Status s =
      Convert(StoreError(absl::DeadlineExceededError("store wait timed out")),
              GlooStage::kConnect);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(), "rank 0/3: AllReduce: store wait timed out");
  EXPECT_EQ(Convert(StoreError(absl::AbortedError("round dropped"))).code(),
            absl::StatusCode::kAborted);
}

TEST(GlooStatusTest, OtherGlooErrorsDependOnTheStage) {
  EXPECT_EQ(
      Convert(::gloo::Exception("Unable to find address"), GlooStage::kDevice)
          .code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Convert(::gloo::EnforceNotMet("f.cc", 1, "rp != nullptr",
                                          "Unable to find address"),
                    GlooStage::kDevice)
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Convert(::gloo::Exception("bad")).code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(Convert(::gloo::InvalidOperationException("bad")).code(),
            absl::StatusCode::kInternal);
}

TEST(GlooStatusTest, NonGlooExceptions) {
  EXPECT_EQ(Convert(std::bad_alloc()).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Convert(std::runtime_error("x")).code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(Convert(42).code(), absl::StatusCode::kUnknown);
}

}  // namespace
}  // namespace muster::comm::internal
