// The Session stream end to end: real RendezvousServer on 127.0.0.1:0, real
// gRPC clients.
#include <grpcpp/grpcpp.h>

#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/common/net.h"
#include "muster/rendezvous/client.h"
#include "muster/rendezvous/server.h"
#include "muster/v1/rendezvous.grpc.pb.h"
#include "tests/testing/rendezvous.h"

namespace muster::rendezvous {
namespace {

using ::muster::testing::LoopbackChannel;
using ::muster::testing::LoopbackEndpoint;
using ::muster::testing::NextOfKind;
using ::muster::testing::PrepareContext;
using ::muster::testing::StartLoopbackServer;
using ::testing::HasSubstr;

constexpr absl::Duration kDeadline = absl::Seconds(10);

v1::Join MakeJoin(const std::string& job, const std::string& node,
                  int min_nodes, int max_nodes,
                  int64_t heartbeat_timeout_ms = 2000) {
  return muster::testing::MakeJoin(
      {.job_id = job,
       .node_id = node,
       .hostname = node + ".host",
       .advertised_addr = "127.0.0.1",
       .local_world_size = 2,
       .min_nodes = min_nodes,
       .max_nodes = max_nodes,
       .master_port = 29500,
       .heartbeat_interval_ms = 50,
       .heartbeat_timeout_ms = heartbeat_timeout_ms});
}

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartLoopbackServer();
    ASSERT_NE(server_, nullptr);
  }

  std::unique_ptr<RendezvousClient> NewClient() {
    GrpcClientOptions options;
    options.endpoint = LoopbackEndpoint(server_->port());
    options.connect_timeout = absl::Seconds(5);
    options.heartbeat_interval = absl::Milliseconds(50);
    return NewGrpcRendezvousClient(options);
  }

  // a and b join `job` as nodes "a" and "b" (min..max nodes) and both get
  // RoundReady. Callers wrap it in ASSERT_NO_FATAL_FAILURE.
  static void JoinBoth(RendezvousClient& a, RendezvousClient& b,
                       const std::string& job, int min_nodes, int max_nodes,
                       int64_t heartbeat_timeout_ms = 2000) {
    ASSERT_TRUE(
        a.Start(MakeJoin(job, "a", min_nodes, max_nodes, heartbeat_timeout_ms))
            .ok());
    ASSERT_TRUE(
        b.Start(MakeJoin(job, "b", min_nodes, max_nodes, heartbeat_timeout_ms))
            .ok());
    ASSERT_TRUE(NextOfKind(a, v1::ServerMessage::kRoundReady).ok());
    ASSERT_TRUE(NextOfKind(b, v1::ServerMessage::kRoundReady).ok());
  }

  std::unique_ptr<RendezvousServer> server_;
};

TEST_F(SessionTest, TwoClientsFormARound) {
  auto a = NewClient();
  auto b = NewClient();
  ASSERT_TRUE(a->Start(MakeJoin("job", "a", 2, 2)).ok());
  ASSERT_TRUE(b->Start(MakeJoin("job", "b", 2, 2)).ok());
  auto ra = NextOfKind(*a, v1::ServerMessage::kRoundReady);
  auto rb = NextOfKind(*b, v1::ServerMessage::kRoundReady);
  ASSERT_TRUE(ra.ok()) << ra.status();
  ASSERT_TRUE(rb.ok()) << rb.status();
  const v1::RoundReady& x = ra->round_ready();
  const v1::RoundReady& y = rb->round_ready();
  EXPECT_EQ(std::set<int>({x.group_rank(), y.group_rank()}),
            std::set<int>({0, 1}));
  EXPECT_EQ(x.group_world_size(), 2);
  EXPECT_EQ(x.world_size(), 4);
  EXPECT_FALSE(x.store_prefix().empty());
  EXPECT_EQ(x.store_prefix(), y.store_prefix());
  EXPECT_EQ(x.round(), y.round());

  // GetStatus sees the running job.
  auto stub = v1::Rendezvous::NewStub(LoopbackChannel(server_->port()));
  grpc::ClientContext context;
  PrepareContext(&context, /*token=*/"", kDeadline);
  v1::GetStatusRequest request;
  request.set_job_id("job");
  v1::GetStatusResponse status;
  ASSERT_TRUE(stub->GetStatus(&context, request, &status).ok());
  ASSERT_EQ(status.jobs_size(), 1);
  EXPECT_EQ(status.jobs(0).job_id(), "job");
  EXPECT_EQ(status.jobs(0).members_size(), 2);

  a->Close("done");
  b->Close("done");
}

TEST_F(SessionTest, HeartbeatsKeepAnIdleRoundAlive) {
  auto a = NewClient();
  auto b = NewClient();
  ASSERT_NO_FATAL_FAILURE(JoinBoth(*a, *b, "hb", 2, 2,
                                   /*heartbeat_timeout_ms=*/300));
  // Several heartbeat timeouts pass with no other traffic: nothing ends the
  // round.
  auto quiet = a->Next(absl::Seconds(1));
  EXPECT_EQ(quiet.status().code(), absl::StatusCode::kDeadlineExceeded)
      << (quiet.ok() ? quiet->DebugString()
                     : std::string(quiet.status().message()));
}

TEST_F(SessionTest, MismatchedJobEndsTheSecondStreamWithFailedPrecondition) {
  auto a = NewClient();
  auto b = NewClient();
  ASSERT_TRUE(a->Start(MakeJoin("sized", "a", 2, 2)).ok());
  ASSERT_TRUE(NextOfKind(*a, v1::ServerMessage::kWaiting).ok());
  ASSERT_TRUE(b->Start(MakeJoin("sized", "b", 3, 3)).ok());
  auto refused = b->Next(kDeadline);
  ASSERT_FALSE(refused.ok()) << refused->DebugString();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition)
      << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("sized"));
  EXPECT_THAT(refused.status().message(), HasSubstr("3"));
  // The stream is over for good.
  EXPECT_EQ(b->Next(absl::Milliseconds(10)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(b->Send(v1::AgentMessage()).ok());
}

TEST_F(SessionTest, ClosingOneClientRestartsTheOther) {
  auto a = NewClient();
  auto b = NewClient();
  ASSERT_NO_FATAL_FAILURE(JoinBoth(*a, *b, "elastic", 1, 2));
  const absl::Time start = absl::Now();
  const absl::Time close_start = absl::Now();
  a->Close("");
  EXPECT_LT(absl::Now() - close_start, absl::Seconds(2));
  auto restart = NextOfKind(*b, v1::ServerMessage::kRestart);
  ASSERT_TRUE(restart.ok()) << restart.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(a->Next(absl::Milliseconds(10)).status().code(),
            absl::StatusCode::kCancelled);
}

TEST_F(SessionTest, LeaveReasonReachesTheOthers) {
  auto a = NewClient();
  auto b = NewClient();
  ASSERT_NO_FATAL_FAILURE(JoinBoth(*a, *b, "leave", 1, 2));
  a->Close("operator stop");
  auto restart = NextOfKind(*b, v1::ServerMessage::kRestart);
  ASSERT_TRUE(restart.ok()) << restart.status();
  EXPECT_THAT(restart->restart().reason(), HasSubstr("operator stop"));
}

TEST_F(SessionTest, ServerShutdownEndsTheSessionAsUnavailable) {
  auto a = NewClient();
  ASSERT_TRUE(a->Start(MakeJoin("down", "a", 2, 2)).ok());
  ASSERT_TRUE(NextOfKind(*a, v1::ServerMessage::kWaiting).ok());
  server_->Shutdown(absl::Seconds(1));
  auto lost = NextOfKind(*a, v1::ServerMessage::kRoundReady);
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kUnavailable)
      << lost.status();
  EXPECT_THAT(lost.status().message(),
              HasSubstr(absl::StrCat("127.0.0.1:", server_->port())));
  EXPECT_THAT(lost.status().message(), HasSubstr("shutting down"));
}

TEST(SessionClientTest, UnreachableEndpointIsNamedWithinTheConnectTimeout) {
  auto port = PickFreePort("127.0.0.1");
  ASSERT_TRUE(port.ok());
  GrpcClientOptions options;
  options.endpoint = absl::StrCat("127.0.0.1:", *port);
  options.connect_timeout = absl::Seconds(1);
  auto client = NewGrpcRendezvousClient(options);
  const absl::Time start = absl::Now();
  absl::Status started = client->Start(MakeJoin("job", "a", 1, 1));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(started.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(started.message(), HasSubstr(options.endpoint));
  EXPECT_THAT(started.message(), HasSubstr("within 1s"));
  EXPECT_THAT(started.message(), HasSubstr("connection refused"));
  EXPECT_LT(took, absl::Milliseconds(1500));
  client->Close("");
}

TEST(SessionClientTest, BadEndpointIsInvalidArgument) {
  GrpcClientOptions options;
  options.endpoint = "127.0.0.1:notaport";
  auto client = NewGrpcRendezvousClient(options);
  EXPECT_EQ(client->Start(MakeJoin("job", "a", 1, 1)).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace muster::rendezvous
