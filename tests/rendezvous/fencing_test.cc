// Fencing (docs/architecture.md, "Fencing"): a musterd that leads but cannot
// confirm its leadership (its etcd renewals late, or its process paused and
// resumed) acts on nothing and sends nothing until it confirms it again. A
// real RendezvousServer on loopback with raw client streams; the test plays
// the replica's renewals through ConfirmLeadershipUntil.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/rendezvous/server.h"
#include "muster/v1/rendezvous.grpc.pb.h"
#include "tests/testing/rendezvous.h"

namespace muster::rendezvous {
namespace {

using ::muster::testing::PrepareContext;
using ::muster::testing::StartLoopbackServer;
using SteadyClock = std::chrono::steady_clock;

constexpr absl::Duration kDeadline = absl::Seconds(30);
// How long the tests watch for a message that must not come. A Restart that
// should come comes within milliseconds; this is generous on a loaded
// machine and still short.
constexpr absl::Duration kQuiet = absl::Milliseconds(700);

// One agent's stream; a thread reads every message into a list.
class Agent {
 public:
  Agent(const std::string& endpoint, const std::string& node, int nodes)
      : node_(node), nodes_(nodes) {
    channel_ =
        grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials());
    stub_ = v1::Rendezvous::NewStub(channel_);
  }
  ~Agent() {
    Cancel();
    if (reader_.joinable()) reader_.join();
  }

  // Opens the stream and joins, claiming `claim` when given.
  bool Join(const v1::RoundReady* claim = nullptr) {
    Cancel();
    if (reader_.joinable()) reader_.join();
    context_ = std::make_unique<grpc::ClientContext>();
    PrepareContext(context_.get(), "", kDeadline);
    stream_ = stub_->Session(context_.get());
    v1::AgentMessage join;
    // A 10 s heartbeat timeout: these agents send no heartbeats of their own.
    *join.mutable_join() =
        muster::testing::MakeJoin({.job_id = "fenced",
                                   .node_id = node_,
                                   .advertised_addr = "127.0.0.1",
                                   .min_nodes = nodes_,
                                   .max_nodes = nodes_,
                                   .heartbeat_timeout_ms = 10'000});
    if (claim != nullptr) {
      *join.mutable_join()->mutable_claim()->mutable_round() = *claim;
      join.mutable_join()->mutable_claim()->set_workers_running(true);
    }
    if (!stream_->Write(join)) return false;
    reader_ = std::thread([this, stream = stream_.get()] {
      v1::ServerMessage msg;
      while (stream->Read(&msg)) {
        absl::MutexLock lock(&mu_);
        messages_.push_back(msg);
      }
      absl::MutexLock lock(&mu_);
      ended_ = true;
    });
    return true;
  }

  bool Send(const v1::AgentMessage& msg) { return stream_->Write(msg); }
  void Cancel() {
    if (context_ != nullptr) context_->TryCancel();
  }

  // The first message of `kind` received so far, waiting up to `timeout`.
  std::optional<v1::ServerMessage> Await(v1::ServerMessage::KindCase kind,
                                         absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    std::optional<v1::ServerMessage> found;
    auto seen = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (const v1::ServerMessage& m : messages_) {
        if (m.kind_case() == kind) {
          found = m;
          return true;
        }
      }
      return ended_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&seen), timeout);
    (void)seen();
    return found;
  }
  int Count(v1::ServerMessage::KindCase kind) {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (const v1::ServerMessage& m : messages_) n += m.kind_case() == kind;
    return n;
  }

 private:
  const std::string node_;
  const int nodes_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::ServerMessage>>
      stream_;
  std::thread reader_;
  absl::Mutex mu_;
  std::vector<v1::ServerMessage> messages_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
};

class FencingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartLoopbackServer();
    ASSERT_NE(server_, nullptr);
    endpoint_ = absl::StrCat("127.0.0.1:", server_->port());
    for (int i = 0; i < 3; ++i) {
      agents_.push_back(
          std::make_unique<Agent>(endpoint_, absl::StrCat("n", i), 3));
      ASSERT_TRUE(agents_.back()->Join()) << i;
    }
    for (int i = 0; i < 3; ++i) {
      auto ready = agents_[i]->Await(v1::ServerMessage::kRoundReady, kDeadline);
      ASSERT_TRUE(ready.has_value()) << "agent " << i << " got no RoundReady";
      ready_.push_back(ready->round_ready());
    }
  }

  // As a paused replica finds itself on waking: its last confirmation ran
  // out a while ago.
  void Unconfirm() {
    server_->ConfirmLeadershipUntil(SteadyClock::now() -
                                    std::chrono::milliseconds(1));
  }
  void Confirm() {
    server_->ConfirmLeadershipUntil(SteadyClock::now() + std::chrono::hours(1));
  }

  std::unique_ptr<RendezvousServer> server_;
  std::string endpoint_;
  std::vector<std::unique_ptr<Agent>> agents_;
  std::vector<v1::RoundReady> ready_;
};

// The case: a paused leader resumes and finds an agent's stream
// closed (the agent left for the leader that replaced it). It must not end
// the round: the agent rejoins, claiming its round, and carries on.
TEST_F(FencingTest, AStreamThatEndsWhileUnconfirmedEndsNoRound) {
  Unconfirm();
  agents_[0]->Cancel();
  absl::SleepFor(kQuiet);
  EXPECT_EQ(agents_[1]->Count(v1::ServerMessage::kRestart), 0);
  EXPECT_EQ(agents_[2]->Count(v1::ServerMessage::kRestart), 0);

  Confirm();
  absl::SleepFor(kQuiet);
  EXPECT_EQ(agents_[1]->Count(v1::ServerMessage::kRestart), 0)
      << "the stream's end was acted on after the confirmation";

  // The agent comes back with its claim: the round goes on (RoundReady of
  // the same round again, no Restart for anyone).
  ASSERT_TRUE(agents_[0]->Join(&ready_[0]));
  auto again = agents_[0]->Await(v1::ServerMessage::kRoundReady, kDeadline);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->round_ready().round(), ready_[0].round());
  absl::SleepFor(kQuiet);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(agents_[i]->Count(v1::ServerMessage::kRestart), 0) << i;
  }
}

// What arrives while the leadership is unconfirmed is held, not lost: a
// worker failure reported then decides the job (no restarts left: it fails)
// once the leadership is confirmed again.
TEST_F(FencingTest, AnEventHeldWhileUnconfirmedIsActedOnOnceConfirmed) {
  Unconfirm();
  v1::AgentMessage failed;
  failed.mutable_workers_failed()->set_round(ready_[1].round());
  v1::WorkerFailure* f = failed.mutable_workers_failed()->add_failures();
  f->set_local_rank(0);
  f->set_exit_code(3);
  ASSERT_TRUE(agents_[1]->Send(failed));
  absl::SleepFor(kQuiet);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(agents_[i]->Count(v1::ServerMessage::kJobFailed), 0)
        << "agent " << i << ": acted on while unconfirmed";
  }
  EXPECT_EQ(server_->coordinator().Status("fenced").jobs(0).state(), "RUNNING");
  EXPECT_GE(server_->HeldEvents(), 1);

  Confirm();
  for (int i = 0; i < 3; ++i) {
    auto failed =
        agents_[i]->Await(v1::ServerMessage::kJobFailed, absl::Seconds(10));
    ASSERT_TRUE(failed.has_value())
        << "agent " << i << ": the held failure was never acted on";
    EXPECT_THAT(failed->job_failed().root_cause(),
                ::testing::HasSubstr("exited with code 3"));
  }
}

// What a stream sent before it ended while the leadership was unconfirmed
// is held too, and acted on once confirmed; its end is not.
TEST_F(FencingTest, WhatAStreamSentBeforeItEndedIsStillActedOn) {
  Unconfirm();
  v1::AgentMessage failed;
  failed.mutable_workers_failed()->set_round(ready_[2].round());
  v1::WorkerFailure* f = failed.mutable_workers_failed()->add_failures();
  f->set_local_rank(0);
  f->set_exit_code(7);
  ASSERT_TRUE(agents_[2]->Send(failed));
  absl::SleepFor(absl::Milliseconds(200));  // (delivered, then the end)
  agents_[2]->Cancel();
  absl::SleepFor(kQuiet);
  EXPECT_EQ(agents_[0]->Count(v1::ServerMessage::kJobFailed), 0);

  Confirm();
  auto verdict =
      agents_[0]->Await(v1::ServerMessage::kJobFailed, absl::Seconds(10));
  ASSERT_TRUE(verdict.has_value()) << "the held failure was dropped";
  EXPECT_THAT(verdict->job_failed().root_cause(),
              ::testing::HasSubstr("exited with code 7"));
}

// A standby acts on nothing either, but refuses at once (it will not lead
// again in this process): its streams end naming no decision.
TEST_F(FencingTest, AStandbyEndsItsStreamsWithoutLosingNodes) {
  server_->StandBy("127.0.0.1:1", "127.0.0.1:2");
  for (int i = 0; i < 3; ++i) {
    auto restart = agents_[i]->Await(v1::ServerMessage::kRestart, kQuiet);
    EXPECT_FALSE(restart.has_value()) << "agent " << i;
  }
  EXPECT_EQ(server_->coordinator().Status("fenced").jobs(0).restart_count(), 0);
  EXPECT_EQ(server_->coordinator().Status("fenced").jobs(0).state(), "RUNNING");
}

}  // namespace
}  // namespace muster::rendezvous
