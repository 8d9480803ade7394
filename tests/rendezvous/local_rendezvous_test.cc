// The in-process rendezvous of a standalone job (LocalRendezvous): a round
// forms with no server, the workers' Store service starts only when a worker
// connects (a real gRPC store client on loopback), a refused Join is
// reported as over gRPC, and shutdown ends the session and the store.
#include "muster/rendezvous/local_rendezvous.h"

#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/rendezvous/client.h"
#include "muster/store/grpc_store.h"
#include "tests/testing/rendezvous.h"
#include "tests/testing/wait.h"

namespace muster::rendezvous {
namespace {

using ::muster::testing::NextOfKind;
using ::muster::testing::WaitUntil;
using ::testing::HasSubstr;

constexpr absl::Duration kDeadline = absl::Seconds(10);

v1::Join OneNodeJoin() {
  return muster::testing::MakeJoin({.job_id = "job",
                                    .node_id = "node-a",
                                    .hostname = "node-a",
                                    .advertised_addr = "127.0.0.1",
                                    .local_world_size = 4,
                                    .node_rank_hint = 0,
                                    .master_port = 29500,
                                    // Far shorter than the test: the
                                    // in-process session must ignore it.
                                    .heartbeat_interval_ms = 10,
                                    .heartbeat_timeout_ms = 50});
}

// A LocalRendezvous whose one agent (OneNodeJoin) is in a formed round.
struct OneNodeRound {
  std::unique_ptr<LocalRendezvous> local;
  std::unique_ptr<RendezvousClient> client;
  v1::RoundReady ready;
};

// Callers wrap it in ASSERT_NO_FATAL_FAILURE.
void StartOneNodeRound(OneNodeRound* round) {
  auto local = LocalRendezvous::Start({});
  ASSERT_TRUE(local.ok()) << local.status();
  round->local = *std::move(local);
  round->client = round->local->NewClient();
  ASSERT_TRUE(round->client->Start(OneNodeJoin()).ok());
  auto ready = NextOfKind(*round->client, v1::ServerMessage::kRoundReady);
  ASSERT_TRUE(ready.ok()) << ready.status();
  round->ready = ready->round_ready();
}

TEST(LocalRendezvousTest, ARoundFormsAndTheStoreStartsOnlyWhenAWorkerConnects) {
  OneNodeRound round;
  ASSERT_NO_FATAL_FAILURE(StartOneNodeRound(&round));
  auto& local = round.local;
  auto& client = round.client;
  EXPECT_EQ(round.ready.world_size(), 4);
  EXPECT_EQ(round.ready.group_world_size(), 1);
  const std::string prefix = round.ready.store_prefix();
#ifdef _WIN32
  // gRPC takes no accepted sockets on Windows: its server listens at once.
  EXPECT_TRUE(local->store_started());
#else
  EXPECT_FALSE(local->store_started());
#endif

  // No heartbeat for far longer than the Join's heartbeat timeout: the agent
  // is in this process, so it is not lost.
  absl::SleepFor(absl::Milliseconds(300));
  auto quiet = client->Next(absl::Milliseconds(10));
  EXPECT_TRUE(absl::IsDeadlineExceeded(quiet.status())) << quiet.status();

  // A worker's store client.
  store::GrpcStoreOptions options;
  options.endpoint = local->store_endpoint();
  options.prefix = prefix;
  options.connect_timeout = absl::Seconds(5);
  auto store = store::NewGrpcStore(options);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Set("k", "v").ok());
  auto value = (*store)->Get("k", absl::Seconds(5));
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "v");
  EXPECT_TRUE(local->store_started());
  // The same KvStore the Coordinator's round cleanup drops.
  EXPECT_TRUE(local->store().Get(prefix, "k").ok());

  v1::AgentMessage done;
  done.mutable_workers_succeeded()->set_round(round.ready.round());
  ASSERT_TRUE(client->Send(done).ok());
  auto verdict = NextOfKind(*client, v1::ServerMessage::kJobSucceeded);
  ASSERT_TRUE(verdict.ok()) << verdict.status();
  // The round ended: its namespace is gone, and a waiting worker hears it.
  auto gone = (*store)->Get("never-set", absl::Seconds(5));
  EXPECT_FALSE(gone.ok());
  client->Close("");
  client.reset();
  local->Shutdown();
}

TEST(LocalRendezvousTest, ARefusedJoinIsReportedAsTheServerWould) {
  auto local = LocalRendezvous::Start({});
  ASSERT_TRUE(local.ok()) << local.status();
  auto client = (*local)->NewClient();
  v1::Join bad = OneNodeJoin();
  bad.set_max_nodes(0);  // max < min
  absl::Status refused = client->Start(bad);
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
}

TEST(LocalRendezvousTest, ShutdownEndsTheSessionAndWaitingStoreCalls) {
  OneNodeRound round;
  ASSERT_NO_FATAL_FAILURE(StartOneNodeRound(&round));
  auto& local = round.local;
  auto& client = round.client;
  store::GrpcStoreOptions options;
  options.endpoint = local->store_endpoint();
  options.prefix = round.ready.store_prefix();
  auto store = store::NewGrpcStore(options);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::Status waited;
  std::thread waiter(
      [&] { waited = (*store)->Get("never-set", absl::Seconds(30)).status(); });
  // EXPECT, not ASSERT: the waiter thread must be joined either way.
  EXPECT_TRUE(WaitUntil([&] { return local->store().PendingWaiters() == 1; },
                        kDeadline));
  const absl::Time start = absl::Now();
  local->Shutdown(absl::Seconds(1));
  waiter.join();
  EXPECT_FALSE(waited.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  auto ended = client->Next(absl::Seconds(5));
  EXPECT_TRUE(absl::IsUnavailable(ended.status())) << ended.status();
  EXPECT_THAT(ended.status().message(), HasSubstr("shutting down"));
}

}  // namespace
}  // namespace muster::rendezvous
