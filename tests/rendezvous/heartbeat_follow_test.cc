// The heartbeat budget over gRPC (muster/rendezvous/heartbeat_budget.h): the
// agent's client follows the interval a server suggests (and keeps its own
// when told to, or when the server suggests none), and a real musterd puts
// its suggestion in RoundReady and LeaseRenewed and renews only heartbeats
// that carry a seq, and those of a waiting agent only through its RoundReady.
// Real gRPC servers on 127.0.0.1:0.
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "muster/rendezvous/client.h"
#include "muster/rendezvous/server.h"
#include "muster/v1/rendezvous.grpc.pb.h"
#include "tests/testing/rendezvous.h"

namespace muster::rendezvous {
namespace {

namespace mt = ::muster::testing;

constexpr absl::Duration kDeadline = absl::Seconds(20);

// A Rendezvous service that answers a Join with one Waiting suggesting
// `suggest_ms` and records when each heartbeat arrives.
class SuggestingService final : public v1::Rendezvous::Service {
 public:
  explicit SuggestingService(int64_t suggest_ms) : suggest_ms_(suggest_ms) {}

  grpc::Status Session(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::ServerMessage, v1::AgentMessage>* stream)
      override {
    v1::AgentMessage msg;
    if (!stream->Read(&msg) || !msg.has_join())
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no Join");
    v1::ServerMessage waiting;
    waiting.mutable_waiting()->set_heartbeat_interval_ms(suggest_ms_);
    stream->Write(waiting);
    while (stream->Read(&msg)) {
      if (!msg.has_heartbeat()) continue;
      absl::MutexLock lock(&mu_);
      beats_.push_back(absl::Now());
    }
    return grpc::Status::OK;
  }

  int beats() const {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(beats_.size());
  }

 private:
  const int64_t suggest_ms_;
  mutable absl::Mutex mu_;
  std::vector<absl::Time> beats_ ABSL_GUARDED_BY(mu_);
};

// How many heartbeats a client with a 50 ms interval and a 2 s lease sends
// in 2 s to a server suggesting `suggest_ms`.
int BeatsIn2s(int64_t suggest_ms, bool follow) {
  SuggestingService service(suggest_ms);
  mt::LoopbackService fake = mt::ServeOnLoopback(&service);
  EXPECT_NE(fake.server, nullptr);
  if (fake.server == nullptr) return -1;

  GrpcClientOptions options;
  options.endpoint = fake.endpoint;
  options.connect_timeout = absl::Seconds(5);
  options.heartbeat_interval = absl::Milliseconds(50);
  options.follow_server_heartbeat_interval = follow;
  options.lease = absl::Seconds(2);
  std::unique_ptr<RendezvousClient> client = NewGrpcRendezvousClient(options);
  v1::Join join;
  join.set_job_id("j");
  join.set_node_id("a");
  EXPECT_TRUE(client->Start(join).ok());
  EXPECT_TRUE(mt::NextOfKind(*client, v1::ServerMessage::kWaiting).ok());
  // Deliberate: the 2 s window the heartbeats are counted in.
  absl::SleepFor(absl::Seconds(2));
  client->Close("");
  fake.server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  return service.beats();
}

TEST(HeartbeatFollowTest, TheClientFollowsTheServersIntervalUpToLeaseQuarter) {
  // Suggested 2 s, capped at lease/4 = 500 ms: about 4 heartbeats in 2 s,
  // where 50 ms would send about 40.
  const int beats = BeatsIn2s(2000, /*follow=*/true);
  EXPECT_GE(beats, 2);
  EXPECT_LE(beats, 8);
}

TEST(HeartbeatFollowTest, AFixedIntervalOrNoSuggestionKeepsItsOwn) {
  EXPECT_GE(BeatsIn2s(2000, /*follow=*/false), 15)
      << "keep_alive_interval set: the server's suggestion is ignored";
  EXPECT_GE(BeatsIn2s(0, /*follow=*/true), 15)
      << "an older server suggests nothing: the agent keeps 50 ms";
}

// A real musterd, with a budget of 1 heartbeat a second: 2 agents get 2 s.
TEST(HeartbeatFollowTest, MusterdSuggestsInRoundReadyAndLeaseRenewed) {
  ServerOptions server_options;
  server_options.listen = "127.0.0.1:0";
  server_options.coordinator.heartbeat_budget_per_second = 1;
  std::unique_ptr<RendezvousServer> server =
      mt::StartLoopbackServer(server_options);
  ASSERT_NE(server, nullptr);
  std::shared_ptr<grpc::Channel> channel = mt::LoopbackChannel(server->port());
  auto stub = v1::Rendezvous::NewStub(channel);
  grpc::ClientContext contexts[2];
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::ServerMessage>>
      streams[2];
  for (int i = 0; i < 2; ++i) {
    mt::PrepareContext(&contexts[i], "", kDeadline);
    streams[i] = stub->Session(&contexts[i]);
    v1::AgentMessage join;
    *join.mutable_join() = mt::MakeJoin({.job_id = "budget",
                                         .node_id = i == 0 ? "a" : "b",
                                         .advertised_addr = "127.0.0.1",
                                         .min_nodes = 2,
                                         .max_nodes = 2,
                                         .heartbeat_timeout_ms = 10'000});
    join.mutable_join()->set_lease_timeout_ms(1000);
    join.mutable_join()->set_lease_seq(100 + i);
    ASSERT_TRUE(streams[i]->Write(join));
  }
  // Agent a: its Join's LeaseRenewed, then its RoundReady, both suggesting.
  bool renewed = false, ready = false;
  v1::ServerMessage msg;
  while (!(renewed && ready) && streams[0]->Read(&msg)) {
    if (msg.has_lease_renewed() && msg.lease_renewed().seq() == 100) {
      renewed = true;
      EXPECT_GT(msg.lease_renewed().heartbeat_interval_ms(), 0);
    }
    if (msg.has_round_ready()) {
      ready = true;
      EXPECT_EQ(msg.round_ready().heartbeat_interval_ms(), 2000);
    }
  }
  ASSERT_TRUE(renewed && ready);
  // A heartbeat without a seq, once a renewal is due (lease/4 = 250 ms), is
  // not answered; the next one with a seq is. Deliberate: lets the 250 ms pass.
  absl::SleepFor(absl::Milliseconds(400));
  v1::AgentMessage hb;
  hb.mutable_heartbeat()->set_round(1);
  ASSERT_TRUE(streams[0]->Write(hb));
  hb.mutable_heartbeat()->set_seq(7);
  ASSERT_TRUE(streams[0]->Write(hb));
  bool got = false;
  while (streams[0]->Read(&msg)) {
    if (!msg.has_lease_renewed()) continue;
    EXPECT_EQ(msg.lease_renewed().seq(), 7)
        << "a heartbeat without a seq was answered";
    EXPECT_EQ(msg.lease_renewed().heartbeat_interval_ms(), 2000);
    got = true;
    break;
  }
  EXPECT_TRUE(got);
  for (auto& c : contexts) c.TryCancel();
  for (auto& s : streams) s->Finish();
}

// Lease fencing on a real musterd: an agent that takes RoundReady as its
// renewal (Join.lease_from_round_ready) gets no LeaseRenewed while it waits
// for its round, where an older agent waiting beside it does; its RoundReady
// carries the seq of its last heartbeat, and in the round its heartbeats are
// renewed again.
TEST(HeartbeatFollowTest, AWaitingAgentIsRenewedOnlyByItsRoundReady) {
  ServerOptions server_options;
  server_options.listen = "127.0.0.1:0";
  std::unique_ptr<RendezvousServer> server =
      mt::StartLoopbackServer(server_options);
  ASSERT_NE(server, nullptr);
  auto stub = v1::Rendezvous::NewStub(mt::LoopbackChannel(server->port()));
  // a (new) and c (older) wait; b (new) completes the round.
  const char* nodes[3] = {"a", "c", "b"};
  const bool from_round_ready[3] = {true, false, true};
  grpc::ClientContext contexts[3];
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::ServerMessage>>
      streams[3];
  auto join = [&](int i) {
    mt::PrepareContext(&contexts[i], "", kDeadline);
    streams[i] = stub->Session(&contexts[i]);
    v1::AgentMessage msg;
    *msg.mutable_join() = mt::MakeJoin({.job_id = "waiting",
                                        .node_id = nodes[i],
                                        .advertised_addr = "127.0.0.1",
                                        .min_nodes = 3,
                                        .max_nodes = 3,
                                        .heartbeat_timeout_ms = 10'000});
    msg.mutable_join()->set_lease_timeout_ms(1000);
    msg.mutable_join()->set_lease_seq(1000 * (i + 1));
    msg.mutable_join()->set_lease_from_round_ready(from_round_ready[i]);
    return streams[i]->Write(msg);
  };
  ASSERT_TRUE(join(0));
  ASSERT_TRUE(join(1));
  // 1.2 s of heartbeats every 100 ms: renewals (every lease/4 = 250 ms) for c.
  v1::AgentMessage hb;
  for (int seq = 1; seq <= 12; ++seq) {
    hb.mutable_heartbeat()->set_seq(seq);
    ASSERT_TRUE(streams[0]->Write(hb));
    hb.mutable_heartbeat()->set_seq(1000 + seq);
    ASSERT_TRUE(streams[1]->Write(hb));
    absl::SleepFor(absl::Milliseconds(100));  // deliberate: the beat's pace
  }
  absl::SleepFor(absl::Milliseconds(500));  // musterd has read them
  ASSERT_TRUE(join(2));
  // Each stream's messages up to its RoundReady.
  auto until_ready = [&](int i, int* renewals) {
    v1::ServerMessage msg;
    while (streams[i]->Read(&msg)) {
      if (msg.has_lease_renewed()) ++*renewals;
      if (msg.has_round_ready()) return msg.round_ready();
    }
    ADD_FAILURE() << nodes[i] << ": no RoundReady";
    return v1::RoundReady();
  };
  int a_renewals = 0, c_renewals = 0;
  const v1::RoundReady a_ready = until_ready(0, &a_renewals);
  EXPECT_EQ(a_renewals, 0) << "a waiting agent was sent LeaseRenewed";
  EXPECT_EQ(a_ready.lease_seq(), 12)
      << "RoundReady must renew the last heartbeat musterd received";
  const v1::RoundReady c_ready = until_ready(1, &c_renewals);
  // Its Join's, and at least one heartbeat's (about 4 on an idle machine;
  // a loaded one may read the heartbeats in a burst).
  EXPECT_GE(c_renewals, 2) << "an older agent is renewed while it waits";
  EXPECT_EQ(c_ready.lease_seq(), 1012);
  // In the round a's next heartbeat is renewed (its renewal is long due).
  hb.mutable_heartbeat()->set_seq(13);
  ASSERT_TRUE(streams[0]->Write(hb));
  v1::ServerMessage msg;
  bool renewed = false;
  while (!renewed && streams[0]->Read(&msg))
    renewed = msg.has_lease_renewed() && msg.lease_renewed().seq() == 13;
  EXPECT_TRUE(renewed);
  for (auto& c : contexts) c.TryCancel();
  for (auto& s : streams) s->Finish();
}

}  // namespace
}  // namespace muster::rendezvous
