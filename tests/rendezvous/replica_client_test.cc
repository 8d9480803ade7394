// The Session client and `muster status` over musterd replicas (issue 25):
// real RendezvousServers on loopback, one a standby (StandBy) that names the
// leader in `muster-leader`, and a fake replica that freezes after answering
// the Join (as a SIGSTOPped leader: its connections stay open).
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/rendezvous/client.h"
#include "muster/rendezvous/server.h"
#include "muster/v1/rendezvous.grpc.pb.h"
#include "tests/testing/rendezvous.h"
#include "tests/testing/tcp_listener.h"

namespace muster::rendezvous {
namespace {

using ::muster::testing::StartLoopbackServer;
using ::testing::HasSubstr;

// A Join to a job of 2 nodes (so that it waits), node "a".
v1::Join Join2(const std::string& job) {
  return testing::MakeJoin(
      {.job_id = job, .node_id = "a", .min_nodes = 2, .max_nodes = 2});
}

// A port nothing listens on: bound, then released.
std::string ClosedEndpoint() {
  int port = 0;
  {
    testing::TcpListener listener("127.0.0.1", 0);
    port = listener.port();
  }
  return absl::StrCat("127.0.0.1:", port);
}

GrpcClientOptions Options(const std::string& endpoint) {
  GrpcClientOptions o;
  o.endpoint = endpoint;
  o.connect_timeout = absl::Seconds(5);
  return o;
}

// Answers the Join with a RoundReady (renewing the lease, of leadership
// `epoch`), then never answers again (reads and drops until the client goes
// away): a SIGSTOPped leader, or with an epoch, a replica as the agent sees
// one after a failover.
class FrozenReplica final : public v1::Rendezvous::Service {
 public:
  explicit FrozenReplica(int64_t epoch = 0) : epoch_(epoch) {}
  grpc::Status Session(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::ServerMessage, v1::AgentMessage>* stream)
      override {
    v1::AgentMessage msg;
    if (!stream->Read(&msg) || !msg.has_join()) return grpc::Status::OK;
    v1::ServerMessage ready;
    ready.set_epoch(epoch_);
    ready.mutable_round_ready()->set_round(1);
    ready.mutable_round_ready()->set_lease_seq(msg.join().lease_seq());
    stream->Write(ready);
    joined_.Notify();
    while (stream->Read(&msg) && !context->IsCancelled()) {
    }
    return grpc::Status::OK;
  }
  bool WaitJoined(absl::Duration timeout) {
    return joined_.WaitForNotificationWithTimeout(timeout);
  }

 private:
  const int64_t epoch_;
  absl::Notification joined_;
};

class ReplicaClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    leader_ = StartLoopbackServer();
    standby_ = StartLoopbackServer();
    ASSERT_NE(leader_, nullptr);
    ASSERT_NE(standby_, nullptr);
    standby_->StandBy(standby_->address(), leader_->address());
  }
  // A client given the standby first, then the leader; it keeps what it
  // learns of the replicas in `memory`.
  std::unique_ptr<RendezvousClient> StandbyFirstClient(
      std::shared_ptr<ReplicaMemory> memory) {
    GrpcClientOptions o =
        Options(absl::StrCat(standby_->address(), ",", leader_->address()));
    o.replicas = std::move(memory);
    return NewGrpcRendezvousClient(o);
  }

  std::unique_ptr<RendezvousServer> leader_;
  std::unique_ptr<RendezvousServer> standby_;
};

TEST_F(ReplicaClientTest, AStandbyFirstSendsTheAgentToTheLeader) {
  auto memory = std::make_shared<ReplicaMemory>();
  auto client = StandbyFirstClient(memory);
  ASSERT_TRUE(client->Start(Join2("job")).ok());
  auto waiting = testing::NextOfKind(*client, v1::ServerMessage::kWaiting);
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  EXPECT_EQ(leader_->coordinator().Status("job").jobs_size(), 1);
  EXPECT_EQ(memory->leader(), leader_->address());
  client->Close("");
}

TEST_F(ReplicaClientTest, OneStandbyGivenSendsTheAgentToTheLeaderItNames) {
  auto memory = std::make_shared<ReplicaMemory>();
  GrpcClientOptions o = Options(standby_->address());
  o.replicas = memory;
  auto first = NewGrpcRendezvousClient(o);
  ASSERT_TRUE(first->Start(Join2("job")).ok());  // one musterd: as before
  auto refused = testing::NextOfKind(*first, v1::ServerMessage::kWaiting);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(refused.status().message(), HasSubstr("standby"));
  EXPECT_EQ(memory->leader(), leader_->address());
  first->Close("");
  // The agent's reconnect: straight to the leader.
  auto again = NewGrpcRendezvousClient(o);
  ASSERT_TRUE(again->Start(Join2("job")).ok());
  EXPECT_TRUE(testing::NextOfKind(*again, v1::ServerMessage::kWaiting).ok());
  again->Close("");
}

TEST_F(ReplicaClientTest, AnUnreachableReplicaIsSkipped) {
  GrpcClientOptions o =
      Options(absl::StrCat(ClosedEndpoint(), ",", leader_->address()));
  auto client = NewGrpcRendezvousClient(o);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(client->Start(Join2("job")).ok());
  // Refused at once: no connect timeout spent on it.
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_TRUE(testing::NextOfKind(*client, v1::ServerMessage::kWaiting).ok());
  client->Close("");
}

TEST_F(ReplicaClientTest, AStandbyWithoutALeaderSendsItToTheNext) {
  standby_->StandBy(standby_->address(), "");
  auto client = NewGrpcRendezvousClient(
      Options(absl::StrCat(standby_->address(), ",", leader_->address())));
  ASSERT_TRUE(client->Start(Join2("job")).ok());
  EXPECT_TRUE(testing::NextOfKind(*client, v1::ServerMessage::kWaiting).ok());
  client->Close("");
}

TEST_F(ReplicaClientTest, NoLeaderAnywhereNamesEveryReplicaAndWhy) {
  standby_->StandBy(standby_->address(), "");
  const std::string closed = ClosedEndpoint();
  GrpcClientOptions o = Options(absl::StrCat(standby_->address(), ",", closed));
  o.connect_timeout = absl::Seconds(1);
  auto client = NewGrpcRendezvousClient(o);
  const absl::Time start = absl::Now();
  absl::Status s = client->Start(Join2("job"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(standby_->address(), ": ")));
  EXPECT_THAT(s.message(), HasSubstr("an election is under way"));
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(closed, ": ")));
}

TEST_F(ReplicaClientTest, ALeaderThatStepsDownIsLeftForTheOneItNames) {
  auto memory = std::make_shared<ReplicaMemory>();
  auto client = StandbyFirstClient(memory);
  ASSERT_TRUE(client->Start(Join2("job")).ok());
  ASSERT_TRUE(testing::NextOfKind(*client, v1::ServerMessage::kWaiting).ok());
  // The roles swap: the open stream ends UNAVAILABLE naming the new leader.
  leader_->StandBy(leader_->address(), standby_->address());
  standby_->Lead();
  auto end = testing::NextOfKind(*client, v1::ServerMessage::kJobSucceeded);
  EXPECT_EQ(end.status().code(), absl::StatusCode::kUnavailable)
      << end.status();
  EXPECT_EQ(memory->leader(), standby_->address());
  auto again = StandbyFirstClient(memory);
  ASSERT_TRUE(again->Start(Join2("job")).ok());
  EXPECT_TRUE(testing::NextOfKind(*again, v1::ServerMessage::kWaiting).ok());
  EXPECT_EQ(standby_->coordinator().Status("job").jobs_size(), 1);
  again->Close("");
}

TEST_F(ReplicaClientTest, ASilentLeaderIsGivenUpAndTriedLast) {
  FrozenReplica frozen;
  testing::LoopbackService fake = testing::ServeOnLoopback(&frozen);
  ASSERT_NE(fake.server, nullptr);
  const std::string& frozen_at = fake.endpoint;

  auto memory = std::make_shared<ReplicaMemory>();
  GrpcClientOptions o =
      Options(absl::StrCat(frozen_at, ",", leader_->address()));
  o.replicas = memory;
  o.lease = absl::Seconds(1);
  o.heartbeat_interval = absl::Milliseconds(250);
  const absl::Duration silence =
      LeaderSilenceBound(o.lease, o.heartbeat_interval);
  EXPECT_EQ(silence, absl::Milliseconds(550));
  int64_t renewed = 0;
  o.lease_seq = [] { return 7; };
  o.on_lease_renewed = [&renewed](int64_t seq) { renewed = seq; };
  auto client = NewGrpcRendezvousClient(o);
  ASSERT_TRUE(client->Start(Join2("job")).ok());
  ASSERT_TRUE(frozen.WaitJoined(absl::Seconds(5)));
  auto ready = testing::NextOfKind(*client, v1::ServerMessage::kRoundReady);
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(renewed, 7);
  const absl::Time renewed_at = absl::Now();
  // Nothing more comes: the session ends UNAVAILABLE after the bound.
  auto end = testing::NextOfKind(*client, v1::ServerMessage::kJobSucceeded);
  const absl::Duration after = absl::Now() - renewed_at;
  EXPECT_EQ(end.status().code(), absl::StatusCode::kUnavailable)
      << end.status();
  EXPECT_THAT(end.status().message(), HasSubstr("no answer for"));
  EXPECT_GE(after, silence - absl::Milliseconds(50));
  EXPECT_LT(after, silence + absl::Seconds(1));
  EXPECT_TRUE(memory->Avoided(frozen_at, absl::Now()));
  client->Close("");

  // The next session goes to the other replica first.
  auto again = NewGrpcRendezvousClient(o);
  ASSERT_TRUE(again->Start(Join2("job")).ok());
  EXPECT_TRUE(testing::NextOfKind(*again, v1::ServerMessage::kWaiting).ok());
  EXPECT_EQ(memory->leader(), leader_->address());
  again->Close("");
  fake.server->Shutdown(std::chrono::system_clock::now());
}

// Fencing tokens (docs/architecture.md, "Fencing"): once the agent saw a
// leader of epoch 10, a replica that answers with epoch 5 is a deposed one
// (its message may have waited in a socket buffer while it was paused): the
// message is not acted on, the session ends UNAVAILABLE naming both epochs,
// and the replica is tried last. A newer epoch is taken and remembered.
TEST_F(ReplicaClientTest, AMessageOfAnOlderEpochIsIgnoredAndEndsTheSession) {
  FrozenReplica old_leader(5);
  testing::LoopbackService old_at = testing::ServeOnLoopback(&old_leader);
  ASSERT_NE(old_at.server, nullptr);
  FrozenReplica new_leader(12);
  testing::LoopbackService new_at = testing::ServeOnLoopback(&new_leader);
  ASSERT_NE(new_at.server, nullptr);

  auto memory = std::make_shared<ReplicaMemory>();
  ASSERT_TRUE(memory->AcceptEpoch(10));
  GrpcClientOptions o =
      Options(absl::StrCat(old_at.endpoint, ",", new_at.endpoint));
  o.replicas = memory;
  auto client = NewGrpcRendezvousClient(o);
  ASSERT_TRUE(client->Start(Join2("job")).ok());
  absl::StatusOr<v1::ServerMessage> stale = client->Next(absl::Seconds(5));
  ASSERT_FALSE(stale.ok()) << "a deposed leader's RoundReady was taken";
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(stale.status().message(), HasSubstr("epoch 5"));
  EXPECT_THAT(stale.status().message(), HasSubstr("epoch 10"));
  EXPECT_TRUE(memory->Avoided(old_at.endpoint, absl::Now()));
  EXPECT_EQ(memory->newest_epoch(), 10);
  client->Close("");

  // The next session goes to the other replica first and takes its epoch.
  auto again = NewGrpcRendezvousClient(o);
  ASSERT_TRUE(again->Start(Join2("job")).ok());
  absl::StatusOr<v1::ServerMessage> ready = again->Next(absl::Seconds(5));
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(ready->epoch(), 12);
  EXPECT_EQ(memory->newest_epoch(), 12);
  again->Close("");
  old_at.server->Shutdown(std::chrono::system_clock::now());
  new_at.server->Shutdown(std::chrono::system_clock::now());
}

// A leader that stands down (or shuts down) ends every stream, and the end
// of the first is no lost node for the others: none hears a Restart, so the
// round is re-adopted elsewhere with its workers running.
TEST_F(ReplicaClientTest, ALeaderStandingDownSendsNoRestart) {
  for (int trial = 0; trial < 5; ++trial) {
    auto server = StartLoopbackServer();
    ASSERT_NE(server, nullptr);
    std::vector<std::unique_ptr<RendezvousClient>> clients;
    for (const char* node : {"a", "b", "c"}) {
      clients.push_back(NewGrpcRendezvousClient(Options(server->address())));
      ASSERT_TRUE(clients.back()
                      ->Start(testing::MakeJoin({.job_id = "round",
                                                 .node_id = node,
                                                 .min_nodes = 3,
                                                 .max_nodes = 3}))
                      .ok());
    }
    for (auto& c : clients) {
      ASSERT_TRUE(testing::NextOfKind(*c, v1::ServerMessage::kRoundReady).ok());
    }
    if (trial % 2 == 0) {
      server->StandBy(server->address(), "127.0.0.1:1");
    } else {
      server->Shutdown(absl::Seconds(1));
    }
    for (auto& c : clients) {
      auto restart = testing::NextOfKind(*c, v1::ServerMessage::kRestart);
      EXPECT_EQ(restart.status().code(), absl::StatusCode::kUnavailable)
          << "trial " << trial << ": "
          << (restart.ok() ? restart->DebugString() : "");
      c->Close("");
    }
  }
}

TEST_F(ReplicaClientTest, StatusFollowsTheLeaderAndNamesEveryReplicaTried) {
  auto client = NewGrpcRendezvousClient(Options(leader_->address()));
  ASSERT_TRUE(client->Start(Join2("seen")).ok());
  ASSERT_TRUE(testing::NextOfKind(*client, v1::ServerMessage::kWaiting).ok());
  auto status =
      QueryStatus(absl::StrCat(ClosedEndpoint(), ",", standby_->address()), "",
                  absl::Seconds(5));
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->jobs_size(), 1);
  EXPECT_EQ(status->jobs(0).job_id(), "seen");
  // Given the standby alone, it asks the leader the standby names.
  auto via_standby = QueryStatus(standby_->address(), "", absl::Seconds(5));
  ASSERT_TRUE(via_standby.ok()) << via_standby.status();
  EXPECT_EQ(via_standby->jobs_size(), 1);
  client->Close("");

  standby_->StandBy(standby_->address(), "");
  const std::string closed = ClosedEndpoint();
  auto none = QueryStatus(absl::StrCat(standby_->address(), ",", closed), "",
                          absl::Seconds(2));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(none.status().message(), HasSubstr(standby_->address()));
  EXPECT_THAT(none.status().message(), HasSubstr("an election is under way"));
  EXPECT_THAT(none.status().message(), HasSubstr(closed));
  auto bad = QueryStatus("h1:1,,h2:2", "", absl::Seconds(1));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace muster::rendezvous
