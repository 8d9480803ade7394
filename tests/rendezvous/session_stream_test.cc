// Session streams on gRPC's async API over several completion queues
// (rendezvous/src/service/session_stream.h): a real RendezvousServer on
// loopback with raw client streams. Run under ASan and TSan too (the stream's
// end and the server's shutdown are where a use-after-free or a leak would
// show).
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/rendezvous/server.h"
#include "muster/v1/rendezvous.grpc.pb.h"
#include "tests/testing/rendezvous.h"

namespace muster::rendezvous {
namespace {

using ::muster::testing::LoopbackChannel;
using ::muster::testing::PrepareContext;
using ::muster::testing::StartLoopbackServer;
using ::testing::HasSubstr;

constexpr absl::Duration kDeadline = absl::Seconds(20);

// One agent's stream through a raw stub; every read ends by kDeadline.
class Agent {
 public:
  Agent(const std::shared_ptr<grpc::Channel>& channel, const std::string& job,
        const std::string& node, int nodes)
      : stub_(v1::Rendezvous::NewStub(channel)) {
    PrepareContext(&context_, "", kDeadline);
    stream_ = stub_->Session(&context_);
    v1::AgentMessage join;
    // A 10 s heartbeat timeout: these agents send no heartbeats of their own.
    *join.mutable_join() =
        muster::testing::MakeJoin({.job_id = job,
                                   .node_id = node,
                                   .advertised_addr = "127.0.0.1",
                                   .min_nodes = nodes,
                                   .max_nodes = nodes,
                                   .heartbeat_timeout_ms = 10'000});
    joined_ = stream_->Write(join);
  }

  bool joined() const { return joined_; }
  grpc::ClientReaderWriter<v1::AgentMessage, v1::ServerMessage>& stream() {
    return *stream_;
  }
  void Cancel() { context_.TryCancel(); }

  // The next message of `kind`, skipping others; false when the stream ended
  // first.
  bool NextOfKind(v1::ServerMessage::KindCase kind, v1::ServerMessage* out) {
    while (stream_->Read(out)) {
      if (out->kind_case() == kind) return true;
    }
    return false;
  }

  // Reads until the server ends the stream; its status.
  grpc::Status End() {
    v1::ServerMessage ignored;
    while (stream_->Read(&ignored)) {
    }
    return stream_->Finish();
  }

 private:
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::ServerMessage>>
      stream_;
  bool joined_ = false;
};

TEST(SessionStreamTest, QueueCountOutOfRangeIsInvalidArgument) {
  for (int queues : {-1, 257}) {
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.session_queues = queues;
    auto server = RendezvousServer::Start(options);
    ASSERT_FALSE(server.ok()) << queues;
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(server.status().message(), HasSubstr("session_queues"));
  }
}

// Streams spread over three queues form one round; a cancelled stream (no
// half-close, no Leave) is seen as the agent lost, and every other agent gets
// Restart; the server's shutdown then ends every open stream as UNAVAILABLE.
TEST(SessionStreamTest, StreamsOnSeveralQueuesFormARoundLoseOneAndShutDown) {
  ServerOptions options;
  options.session_queues = 3;
  auto server = StartLoopbackServer(options);
  ASSERT_NE(server, nullptr);
  constexpr int kAgents = 24;
  // Several connections, so that streams come from more than one transport.
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < 3; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("muster.test.channel", i);  // not shared between channels
    channels.push_back(
        grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server->port()),
                                  grpc::InsecureChannelCredentials(), args));
  }
  std::vector<std::unique_ptr<Agent>> agents;
  for (int i = 0; i < kAgents; ++i) {
    agents.push_back(std::make_unique<Agent>(channels[i % channels.size()],
                                             "queues", absl::StrCat("n", i),
                                             kAgents));
    ASSERT_TRUE(agents.back()->joined()) << i;
  }
  for (int i = 0; i < kAgents; ++i) {
    v1::ServerMessage ready;
    ASSERT_TRUE(agents[i]->NextOfKind(v1::ServerMessage::kRoundReady, &ready))
        << "agent " << i << ": " << agents[i]->End().error_message();
    EXPECT_EQ(ready.round_ready().group_world_size(), kAgents);
  }
  EXPECT_EQ(server->coordinator().ConnectedAgents(), kAgents);

  agents[5]->Cancel();
  for (int i = 0; i < kAgents; ++i) {
    if (i == 5) continue;
    v1::ServerMessage restart;
    ASSERT_TRUE(agents[i]->NextOfKind(v1::ServerMessage::kRestart, &restart))
        << "agent " << i << ": " << agents[i]->End().error_message();
  }
  EXPECT_EQ(agents[5]->End().error_code(), grpc::StatusCode::CANCELLED);

  server->Shutdown(absl::Seconds(5));
  for (int i = 0; i < kAgents; ++i) {
    if (i == 5) continue;
    grpc::Status end = agents[i]->End();
    EXPECT_EQ(end.error_code(), grpc::StatusCode::UNAVAILABLE) << i;
    EXPECT_THAT(end.error_message(), HasSubstr("shutting down")) << i;
  }
}

// Each stream reads into a protobuf arena it resets every few messages: a
// message after many heartbeats is still read whole (here a Leave's reason
// reaches the other agent).
TEST(SessionStreamTest, MessageAfterManyHeartbeatsIsReadWhole) {
  ServerOptions options;
  options.session_queues = 2;
  auto server = StartLoopbackServer(options);
  ASSERT_NE(server, nullptr);
  auto channel = LoopbackChannel(server->port());
  Agent a(channel, "arena", "a", 2);
  Agent b(channel, "arena", "b", 2);
  ASSERT_TRUE(a.joined() && b.joined());
  v1::ServerMessage msg;
  ASSERT_TRUE(a.NextOfKind(v1::ServerMessage::kRoundReady, &msg));
  ASSERT_TRUE(b.NextOfKind(v1::ServerMessage::kRoundReady, &msg));
  const int64_t round = msg.round_ready().round();
  for (int i = 0; i < 50; ++i) {
    v1::AgentMessage beat;
    beat.mutable_heartbeat()->set_round(round);
    ASSERT_TRUE(a.stream().Write(beat)) << i;
  }
  v1::AgentMessage leave;
  leave.mutable_leave()->set_reason("a reason after fifty heartbeats");
  ASSERT_TRUE(a.stream().Write(leave));
  ASSERT_TRUE(b.NextOfKind(v1::ServerMessage::kRestart, &msg))
      << b.End().error_message();
  EXPECT_THAT(msg.restart().reason(),
              HasSubstr("a reason after fifty heartbeats"));
}

}  // namespace
}  // namespace muster::rendezvous
