#include "tests/testing/rendezvous.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace muster::testing {
namespace {

TEST(MakeJoinTest, SetsTheNamedFieldsAndLeavesTheRestUnset) {
  const v1::Join join = MakeJoin({.job_id = "j",
                                  .node_id = "b",
                                  .advertised_addr = "127.0.0.1",
                                  .local_world_size = 2,
                                  .max_nodes = 3,
                                  .master_port = 29500});
  EXPECT_EQ(join.job_id(), "j");
  EXPECT_EQ(join.node_id(), "b");
  EXPECT_EQ(join.hostname(), "");
  EXPECT_EQ(join.advertised_addr(), "127.0.0.1");
  EXPECT_EQ(join.local_world_size(), 2);
  EXPECT_EQ(join.min_nodes(), 1);
  EXPECT_EQ(join.max_nodes(), 3);
  EXPECT_EQ(join.node_rank_hint(), -1);
  EXPECT_EQ(join.master_port(), 29500);
  EXPECT_EQ(join.heartbeat_interval_ms(), 0);
  EXPECT_EQ(join.session_secret(), "");
}

TEST(StartLoopbackServerTest, ServesOnLoopbackAndNextOfKindSkipsWaiting) {
  auto server = StartLoopbackServer();
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->address(), LoopbackEndpoint(server->port()));
  rendezvous::GrpcClientOptions options;
  options.endpoint = LoopbackEndpoint(server->port());
  auto a = rendezvous::NewGrpcRendezvousClient(options);
  auto b = rendezvous::NewGrpcRendezvousClient(options);
  ASSERT_TRUE(
      a->Start(MakeJoin({.node_id = "a", .min_nodes = 2, .max_nodes = 2}))
          .ok());
  // a alone: Waiting only, so RoundReady does not come before the deadline.
  auto early =
      NextOfKind(*a, v1::ServerMessage::kRoundReady, absl::Milliseconds(300));
  EXPECT_EQ(early.status().code(), absl::StatusCode::kDeadlineExceeded)
      << early.status();
  ASSERT_TRUE(
      b->Start(MakeJoin({.node_id = "b", .min_nodes = 2, .max_nodes = 2}))
          .ok());
  auto ready = NextOfKind(*a, v1::ServerMessage::kRoundReady);
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(ready->round_ready().group_world_size(), 2);
  a->Close("");
  b->Close("");
}

}  // namespace
}  // namespace muster::testing
