// RendezvousServer on loopback: binding, health, shutdown with open streams and
// waiting calls.
#include "muster/rendezvous/server.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>
#ifdef _WIN32
#include <windows.h>
#endif

#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "muster/store/grpc_store.h"
#include "muster/v1/rendezvous.grpc.pb.h"
#include "tests/testing/rendezvous.h"
#include "tests/testing/wait.h"

namespace muster::rendezvous {
namespace {

using ::muster::testing::LoopbackChannel;
using ::muster::testing::LoopbackEndpoint;
using ::muster::testing::PrepareContext;
using ::muster::testing::RawSession;
using ::muster::testing::StartLoopbackServer;
using ::muster::testing::WaitUntil;
using ::testing::HasSubstr;

constexpr absl::Duration kDeadline = absl::Seconds(10);

// Whether the OS names the process that holds a socket. Not under wine, where
// every socket is wineserver's (GetExtendedTcpTable's owner is then 0).
bool SocketOwnersVisible() {
#ifdef _WIN32
  return GetProcAddress(GetModuleHandleA("ntdll.dll"), "wine_get_version") ==
         nullptr;
#else
  return true;
#endif
}

TEST(RendezvousServerTest, PortZeroPicksAPort) {
  auto server = StartLoopbackServer();
  ASSERT_NE(server, nullptr);
  EXPECT_GT(server->port(), 0);
  EXPECT_EQ(server->address(), absl::StrCat("127.0.0.1:", server->port()));
}

TEST(RendezvousServerTest, SecondServerOnTheSamePortFailsNamingPortAndHolder) {
  auto first = StartLoopbackServer();
  ASSERT_NE(first, nullptr);
  for (const std::string host : {"127.0.0.1", "0.0.0.0"}) {
    ServerOptions options;
    options.listen = absl::StrCat(host, ":", first->port());
    auto second = RendezvousServer::Start(options);
    ASSERT_FALSE(second.ok()) << "two servers share port " << first->port();
    EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(second.status().message(),
                HasSubstr(absl::StrCat(first->port())));
    EXPECT_THAT(second.status().message(),
                HasSubstr(SocketOwnersVisible()
                              ? absl::StrCat("pid ", getpid())
                              : std::string("the port is in use by")));
  }
}

TEST(RendezvousServerTest, MalformedListenAddressIsInvalidArgument) {
  ServerOptions options;
  options.listen = "127.0.0.1:notaport";
  auto server = RendezvousServer::Start(options);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(), HasSubstr("notaport"));
}

TEST(RendezvousServerTest, AddressNotOnThisHostIsUnavailable) {
  ServerOptions options;
  options.listen =
      "192.0.2.1:0";  // TEST-NET-1: never an address of this machine
  auto server = RendezvousServer::Start(options);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(server.status().message(), HasSubstr("192.0.2.1"));
  EXPECT_THAT(server.status().message(), HasSubstr("on this host"));
}

TEST(RendezvousServerTest, HealthCheckServes) {
  auto server = StartLoopbackServer();
  ASSERT_NE(server, nullptr);
  auto health =
      grpc::health::v1::Health::NewStub(LoopbackChannel(server->port()));
  for (const std::string service :
       {"", "muster.v1.Rendezvous", "muster.v1.Store"}) {
    grpc::ClientContext context;
    PrepareContext(&context, /*token=*/"", kDeadline);
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    grpc::Status s = health->Check(&context, request, &response);
    ASSERT_TRUE(s.ok()) << service << ": " << s.error_message();
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING)
        << service;
  }
}

TEST(RendezvousServerTest, HealthWatchSeesNotServingAtShutdown) {
  auto server = StartLoopbackServer();
  ASSERT_NE(server, nullptr);
  auto health =
      grpc::health::v1::Health::NewStub(LoopbackChannel(server->port()));
  grpc::ClientContext context;
  PrepareContext(&context, /*token=*/"", kDeadline);
  grpc::health::v1::HealthCheckRequest request;
  auto watch = health->Watch(&context, request);
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_TRUE(watch->Read(&response));
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  std::thread stopper([&] { server->Shutdown(absl::Seconds(2)); });
  bool saw_not_serving = false;
  while (watch->Read(&response)) {
    if (response.status() ==
        grpc::health::v1::HealthCheckResponse::NOT_SERVING) {
      saw_not_serving = true;
    }
  }
  watch->Finish();
  stopper.join();
  EXPECT_TRUE(saw_not_serving);
}

TEST(RendezvousServerTest,
     ShutdownWithOpenStreamsAndWaitingGetsReturnsWithinGrace) {
  auto server = StartLoopbackServer();
  ASSERT_NE(server, nullptr);

  // A Session stream that has sent nothing yet, and one stuck in a Store wait.
  RawSession session(LoopbackChannel(server->port()));

  auto store = store::NewGrpcStore(
      {.endpoint = LoopbackEndpoint(server->port()), .prefix = "job/1"});
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::string> got;
  std::thread getter([&] { got = (*store)->Get("never", absl::Seconds(30)); });
  ASSERT_TRUE(WaitUntil([&] { return server->store().PendingWaiters() == 1; },
                        kDeadline));

  const absl::Duration grace = absl::Seconds(2);
  const absl::Time start = absl::Now();
  server->Shutdown(grace);
  EXPECT_LT(absl::Now() - start, grace + absl::Milliseconds(500));

  getter.join();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable)
      << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("shutting down"));

  int messages = -1;
  grpc::Status end = session.Finish(&messages);
  EXPECT_EQ(messages, 0);
  EXPECT_EQ(end.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(end.error_message(), HasSubstr("musterd is shutting down"));

  // Idempotent, and Wait returns once shut down.
  server->Shutdown();
  server->Wait();
}

TEST(RendezvousServerTest, WaitReturnsWhenAnotherThreadShutsDown) {
  auto server = StartLoopbackServer();
  ASSERT_NE(server, nullptr);
  std::thread stopper([&] { server->Shutdown(absl::Milliseconds(100)); });
  server->Wait();
  stopper.join();
}

TEST(RendezvousServerTest, SessionMustStartWithJoin) {
  auto server = StartLoopbackServer();
  ASSERT_NE(server, nullptr);
  RawSession session(LoopbackChannel(server->port()));
  v1::AgentMessage heartbeat;
  heartbeat.mutable_heartbeat()->set_round(1);
  ASSERT_TRUE(session.stream().Write(heartbeat));
  int messages = -1;
  grpc::Status end = session.Finish(&messages);
  EXPECT_EQ(messages, 0);
  EXPECT_EQ(end.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(end.error_message(), HasSubstr("Join"));
}

TEST(RendezvousServerTest, RefusedJoinEndsTheStreamWithTheCoordinatorsStatus) {
  auto server = StartLoopbackServer();
  ASSERT_NE(server, nullptr);
  RawSession session(LoopbackChannel(server->port()));
  v1::AgentMessage join;
  join.mutable_join()->set_node_id("n");  // no job id
  join.mutable_join()->set_local_world_size(1);
  join.mutable_join()->set_min_nodes(1);
  join.mutable_join()->set_max_nodes(1);
  ASSERT_TRUE(session.stream().Write(join));
  int messages = -1;
  grpc::Status end = session.Finish(&messages);
  EXPECT_EQ(messages, 0);
  EXPECT_EQ(end.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << end.error_message();
  EXPECT_FALSE(end.error_message().empty());
  EXPECT_EQ(server->coordinator().ConnectedAgents(), 0);
}

}  // namespace
}  // namespace muster::rendezvous
