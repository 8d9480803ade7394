// ElasticAgent on its seams: a FakeClock, a FakeProcessLauncher (no process
// runs) and a fake rendezvous session the test plays the server on. Each test
// runs the agent's loop on a thread and drives it message by message; every
// wait has a deadline, and the agent's own timeouts (grace periods, the
// watchdog, the reconnect window) run on the fake clock, so a test takes
// milliseconds.
#include "muster/agent/elastic_agent.h"

#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/agent/exit_codes.h"
#include "muster/platform/clock.h"
#include "muster/platform/signals.h"
#include "platform/fake/fake_process.h"

namespace muster::agent {
namespace {

using platform::FakeProcesses;
using ::testing::HasSubstr;

// Real time a test waits for the agent to do something.
constexpr absl::Duration kDeadline = absl::Seconds(10);

// The server side of every session the agent opens. Thread-safe.
class FakeServer {
 public:
  std::unique_ptr<rendezvous::RendezvousClient> NewClient(
      const rendezvous::GrpcClientOptions& options);

  // The next message of the current session.
  void Push(v1::ServerMessage msg) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(msg));
  }
  // The current session ends: the agent's Next and Send see UNAVAILABLE.
  void BreakStream() {
    absl::MutexLock lock(&mu_);
    broken_session_ = session_;
    queue_.clear();
  }
  // Whether new sessions are refused (Start fails UNAVAILABLE).
  void RefuseSessions(bool refuse) {
    absl::MutexLock lock(&mu_);
    refuse_ = refuse;
  }
  // Waits for the agent's next message of `kind` after the ones already
  // taken; nullopt after kDeadline.
  std::optional<v1::AgentMessage> WaitFor(v1::AgentMessage::KindCase kind,
                                          absl::Duration timeout = kDeadline) {
    absl::MutexLock lock(&mu_);
    // A pure condition: absl::Mutex may evaluate it more than once.
    auto seen = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (size_t i = taken_; i < received_.size(); ++i) {
        if (received_[i].kind_case() == kind) return true;
      }
      return false;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&seen), timeout)) {
      return std::nullopt;
    }
    while (received_[taken_].kind_case() != kind) ++taken_;
    return received_[taken_++];
  }
  int sessions() {
    absl::MutexLock lock(&mu_);
    return session_;
  }
  std::vector<std::string> leave_reasons() {
    absl::MutexLock lock(&mu_);
    return leave_reasons_;
  }
  // The first session's Join (StartAgent waits for it).
  v1::Join first_join() {
    absl::MutexLock lock(&mu_);
    return received_.empty() ? v1::Join() : received_.front().join();
  }

 private:
  class Client;
  absl::Mutex mu_;
  int session_ ABSL_GUARDED_BY(mu_) = 0;  // the current one (1-based)
  int broken_session_ ABSL_GUARDED_BY(mu_) = 0;
  bool refuse_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<v1::ServerMessage> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::AgentMessage> received_ ABSL_GUARDED_BY(mu_);
  size_t taken_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> leave_reasons_ ABSL_GUARDED_BY(mu_);
};

class FakeServer::Client : public rendezvous::RendezvousClient {
 public:
  explicit Client(FakeServer* server) : server_(server) {}

  absl::Status Start(const v1::Join& join) override {
    absl::MutexLock lock(&server_->mu_);
    if (server_->refuse_) {
      return absl::UnavailableError("fake server: nothing listens");
    }
    session_ = ++server_->session_;
    server_->queue_.clear();
    v1::AgentMessage msg;
    *msg.mutable_join() = join;
    server_->received_.push_back(std::move(msg));
    return absl::OkStatus();
  }
  absl::Status Send(const v1::AgentMessage& msg) override {
    absl::MutexLock lock(&server_->mu_);
    if (Broken()) return absl::UnavailableError("fake stream broken");
    server_->received_.push_back(msg);
    return absl::OkStatus();
  }
  absl::StatusOr<v1::ServerMessage> Next(absl::Duration timeout) override {
    absl::MutexLock lock(&server_->mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(server_->mu_) {
      return Broken() || !server_->queue_.empty();
    };
    server_->mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
    if (Broken()) return absl::UnavailableError("fake stream broken");
    if (server_->queue_.empty()) return absl::DeadlineExceededError("none");
    v1::ServerMessage msg = std::move(server_->queue_.front());
    server_->queue_.pop_front();
    return msg;
  }
  void SetRound(int64_t) override {}
  void CloseWith(const v1::Leave& leave) override {
    absl::MutexLock lock(&server_->mu_);
    if (!leave.reason().empty()) {
      server_->leave_reasons_.emplace_back(leave.reason());
    }
  }

 private:
  bool Broken() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(server_->mu_) {
    return session_ != server_->session_ ||
           session_ == server_->broken_session_;
  }
  FakeServer* const server_;
  int session_ = 0;
};

std::unique_ptr<rendezvous::RendezvousClient> FakeServer::NewClient(
    const rendezvous::GrpcClientOptions&) {
  return std::make_unique<Client>(this);
}

v1::ServerMessage RoundReady(int64_t round, int nproc) {
  v1::ServerMessage msg;
  v1::RoundReady* r = msg.mutable_round_ready();
  r->set_round(round);
  r->set_group_rank(0);
  r->set_group_world_size(1);
  r->set_rank_offset(0);
  r->set_world_size(nproc);
  r->set_master_addr("10.0.0.1");
  r->set_master_port(29500);
  r->set_store_prefix(absl::StrCat("job/", round));
  r->set_max_restarts(3);
  return msg;
}

// The server's verdicts.
v1::ServerMessage JobSucceeded() {
  v1::ServerMessage msg;
  msg.mutable_job_succeeded();
  return msg;
}

v1::ServerMessage JobFailed(const std::string& root_cause) {
  v1::ServerMessage msg;
  msg.mutable_job_failed()->set_root_cause(root_cause);
  return msg;
}

v1::ServerMessage Restart(int64_t round, const std::string& reason) {
  v1::ServerMessage msg;
  msg.mutable_restart()->set_round(round);
  msg.mutable_restart()->set_reason(reason);
  return msg;
}

class ElasticAgentTest : public ::testing::Test {
 protected:
  ElasticAgentTest() : launcher_(&clock_) {
    log_dir_ =
        std::filesystem::temp_directory_path() /
        absl::StrCat(
            "muster-agent-test-",
            ::testing::UnitTest::GetInstance()->current_test_info()->name(),
            "-", absl::ToUnixNanos(absl::Now()));
    config_.mode = RendezvousMode::kDynamic;
    config_.run_id = "job";
    config_.rdzv_endpoint = "fake-server:29400";
    config_.local_addr = "10.0.0.1";
    config_.master_port = 29500;
    config_.nproc_per_node = 2;
    config_.min_nodes = 1;
    config_.max_nodes = 1;
    config_.program = {"/bin/true"};
    config_.log_dir = log_dir_.string();
    config_.stop_grace = absl::Seconds(30);
  }
  ~ElasticAgentTest() override {
    if (agent_thread_.joinable()) {
      agent_->RequestStop(platform::kSignalTerminate);
      agent_thread_.join();
    }
    std::error_code ec;
    std::filesystem::remove_all(log_dir_, ec);
  }

  void StartAgent() {
    AgentDeps deps;
    deps.clock = &clock_;
    deps.launcher = &launcher_;
    deps.new_client = [this](const rendezvous::GrpcClientOptions& o) {
      return server_.NewClient(o);
    };
    agent_ = std::make_unique<ElasticAgent>(config_, std::move(deps));
    agent_thread_ = std::thread([this] {
      const int rc = agent_->Run();
      absl::MutexLock lock(&mu_);
      rc_ = rc;
    });
    ASSERT_TRUE(server_.WaitFor(v1::AgentMessage::kJoin).has_value());
  }

  // The agent's exit status, once Run returned (nullopt after kDeadline).
  std::optional<int> WaitForExit() {
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return rc_.has_value();
    };
    mu_.AwaitWithTimeout(absl::Condition(&done), kDeadline);
    std::optional<int> rc = rc_;
    if (rc.has_value()) {
      mu_.Unlock();
      agent_thread_.join();
      mu_.Lock();
    }
    return rc;
  }

  // Sends round `round` and returns its workers.
  std::shared_ptr<FakeProcesses> StartRound(int64_t round, size_t nth_group) {
    server_.Push(RoundReady(round, config_.nproc_per_node));
    return launcher_.WaitForGroup(nth_group, kDeadline);
  }

  FakeClock clock_;
  platform::FakeProcessLauncher launcher_;
  FakeServer server_;
  AgentConfig config_;
  std::filesystem::path log_dir_;
  std::unique_ptr<ElasticAgent> agent_;
  std::thread agent_thread_;
  absl::Mutex mu_;
  std::optional<int> rc_ ABSL_GUARDED_BY(mu_);
};

TEST_F(ElasticAgentTest, WorkersSucceedThenJobSucceeds) {
  StartAgent();
  auto workers = StartRound(1, 1);
  ASSERT_NE(workers, nullptr);
  ASSERT_EQ(workers->specs().size(), 2u);
  // The worker contract reaches the launcher.
  EXPECT_EQ(workers->specs()[1].env.at("RANK"), "1");
  EXPECT_EQ(workers->specs()[1].env.at("WORLD_SIZE"), "2");
  EXPECT_EQ(workers->specs()[1].env.at("MASTER_PORT"), "29500");
  // torchrun's console: the tee header is "[<role><local rank>]:", and a
  // stream that is not teed is not prefixed.
  EXPECT_EQ(workers->specs()[1].line_prefix, "[default1]:");
  EXPECT_FALSE(workers->specs()[1].stdout_route.prefixed);
  // torchrun's log layout: <log-dir>/<run-id>_<random>/attempt_<n>/<local>/.
  const std::string error_file =
      workers->specs()[1].env.at("TORCHELASTIC_ERROR_FILE");
  const std::filesystem::path run_dir = std::filesystem::path(error_file)
                                            .parent_path()
                                            .parent_path()
                                            .parent_path();
  EXPECT_EQ(run_dir.parent_path(), log_dir_);
  EXPECT_TRUE(absl::StartsWith(run_dir.filename().string(), "job_"))
      << error_file;
  EXPECT_GT(run_dir.filename().string().size(), 4u) << error_file;
  EXPECT_TRUE(absl::EndsWith(error_file, "/attempt_0/1/error.json"))
      << error_file;
  EXPECT_EQ(workers->specs()[0].argv, config_.program);
  workers->Exit(0, 0);
  workers->Exit(1, 0);
  auto report = server_.WaitFor(v1::AgentMessage::kWorkersSucceeded);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->workers_succeeded().round(), 1);

  server_.Push(JobSucceeded());
  EXPECT_EQ(WaitForExit(), kExitSuccess);
  EXPECT_TRUE(workers->released());
}

TEST_F(ElasticAgentTest, WorkerFailureIsReportedAndTheRestStopped) {
  StartAgent();
  auto workers = StartRound(1, 1);
  ASSERT_NE(workers, nullptr);
  workers->SetLastStderrLine(1, "ModuleNotFoundError: No module named 'x'");
  workers->Exit(1, 3);
  auto report = server_.WaitFor(v1::AgentMessage::kWorkersFailed);
  ASSERT_TRUE(report.has_value());
  const v1::WorkersFailed& failed = report->workers_failed();
  EXPECT_EQ(failed.round(), 1);
  // Only the worker that failed by itself, not the one the agent stopped.
  ASSERT_EQ(failed.failures_size(), 1);
  EXPECT_EQ(failed.failures(0).local_rank(), 1);
  EXPECT_EQ(failed.failures(0).global_rank(), 1);
  EXPECT_EQ(failed.failures(0).exit_code(), 3);
  EXPECT_EQ(failed.failures(0).signal(), 0);
  EXPECT_THAT(failed.failures(0).error_message(),
              HasSubstr("No module named 'x' (its last line on stderr)"));
  // The survivor was stopped with SIGTERM and the grace period.
  ASSERT_EQ(workers->stop_calls().size(), 1u);
  EXPECT_EQ(workers->stop_calls()[0].signal, platform::kSignalTerminate);
  EXPECT_EQ(workers->stop_calls()[0].grace, absl::Seconds(30));
  EXPECT_FALSE(workers->running(0));

  server_.Push(JobFailed("rank 1 exited with code 3"));
  EXPECT_EQ(WaitForExit(), kExitJobFailed);
}

TEST_F(ElasticAgentTest, RestartStopsWithGraceThenKillAndRejoins) {
  StartAgent();
  auto first = StartRound(1, 1);
  ASSERT_NE(first, nullptr);
  // Worker 0 ignores SIGTERM: it must be killed, but only after the grace.
  first->IgnoreStopSignals(0);
  const absl::Time before = clock_.Now();
  server_.Push(Restart(1, "node b lost"));
  // The agent rejoins once its workers are gone.
  auto rejoin = server_.WaitFor(v1::AgentMessage::kJoin);
  ASSERT_TRUE(rejoin.has_value());
  ASSERT_EQ(first->stop_calls().size(), 1u);
  const FakeProcesses::StopCall stop = first->stop_calls()[0];
  EXPECT_EQ(stop.signal, platform::kSignalTerminate);
  EXPECT_EQ(stop.grace, absl::Seconds(30));
  EXPECT_TRUE(stop.killed_after_grace);
  EXPECT_GE(clock_.Now() - before, absl::Seconds(30));
  EXPECT_EQ(first->Poll().exits.size(), 2u);
  EXPECT_TRUE(first->released());

  auto second = StartRound(2, 2);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->specs()[0].env.at("MUSTER_ROUND"), "2");
  second->Exit(0, 0);
  second->Exit(1, 0);
  ASSERT_TRUE(server_.WaitFor(v1::AgentMessage::kWorkersSucceeded));
  server_.Push(JobSucceeded());
  EXPECT_EQ(WaitForExit(), kExitSuccess);
}

TEST_F(ElasticAgentTest, ReconnectKeepsTheWorkersOfTheSameRound) {
  StartAgent();
  auto workers = StartRound(1, 1);
  ASSERT_NE(workers, nullptr);
  server_.BreakStream();
  // A new session with the same node id.
  auto join = server_.WaitFor(v1::AgentMessage::kJoin);
  ASSERT_TRUE(join.has_value());
  EXPECT_EQ(server_.sessions(), 2);
  // The server gives the node its place back: the workers carry on.
  server_.Push(RoundReady(1, config_.nproc_per_node));
  workers->Exit(0, 0);
  workers->Exit(1, 0);
  ASSERT_TRUE(server_.WaitFor(v1::AgentMessage::kWorkersSucceeded));
  EXPECT_TRUE(workers->stop_calls().empty());
  EXPECT_EQ(launcher_.groups().size(), 1u);
  server_.Push(JobSucceeded());
  EXPECT_EQ(WaitForExit(), kExitSuccess);
}

TEST_F(ElasticAgentTest, ServerGoneForTheReconnectWindowStopsTheWorkers) {
  config_.reconnect_timeout = absl::Seconds(10);
  StartAgent();
  auto workers = StartRound(1, 1);
  ASSERT_NE(workers, nullptr);
  const absl::Time before = clock_.Now();
  server_.RefuseSessions(true);
  server_.BreakStream();
  EXPECT_EQ(WaitForExit(), kExitUnavailable);
  // The whole window passed (on the fake clock), with backoff between tries.
  EXPECT_GE(clock_.Now() - before, absl::Seconds(10));
  EXPECT_EQ(workers->stop_calls().size(), 1u);
  EXPECT_FALSE(workers->running(0));
  EXPECT_FALSE(workers->running(1));
}

TEST_F(ElasticAgentTest, StopRequestForwardsStopsLeavesAndExits128PlusSignal) {
  StartAgent();
  auto workers = StartRound(1, 1);
  ASSERT_NE(workers, nullptr);
  agent_->RequestStop(platform::kSignalTerminate);
  EXPECT_EQ(WaitForExit(), kExitSignalBase + platform::kSignalTerminate);
  // Forwarded to the workers, then the group stopped with the same signal.
  EXPECT_THAT(workers->signals(),
              ::testing::ElementsAre(platform::kSignalTerminate));
  ASSERT_FALSE(workers->stop_calls().empty());
  EXPECT_EQ(workers->stop_calls()[0].signal, platform::kSignalTerminate);
  EXPECT_THAT(server_.leave_reasons(),
              ::testing::ElementsAre("agent stopped by SIGTERM"));
}

TEST_F(ElasticAgentTest, WatchdogKillsASilentWorkerAndReportsItHung) {
  config_.worker_timeout = absl::Seconds(5);
  StartAgent();
  auto workers = StartRound(1, 1);
  ASSERT_NE(workers, nullptr);
  // No progress file is ever written; fake time passes, a second at a time
  // (the watchdog starts its count when the agent has the group, a moment
  // after the launcher started it).
  std::optional<v1::AgentMessage> report;
  const absl::Time deadline = absl::Now() + kDeadline;
  while (!report.has_value() && absl::Now() < deadline) {
    clock_.Advance(absl::Seconds(1));
    report = server_.WaitFor(v1::AgentMessage::kWorkersFailed,
                             absl::Milliseconds(50));
  }
  ASSERT_TRUE(report.has_value());
  ASSERT_GE(report->workers_failed().failures_size(), 1);
  const v1::WorkerFailure& f = report->workers_failed().failures(0);
  EXPECT_EQ(f.signal(), platform::kSignalKill);
  EXPECT_THAT(f.error_message(), HasSubstr("hung: no progress for 5s"));
  EXPECT_FALSE(workers->kills().empty());
  server_.Push(JobFailed("hung"));
  EXPECT_EQ(WaitForExit(), kExitJobFailed);
}

// musterd's progress watch (issue 28): when musterd watches the round, the
// agent's own watchdog waits a grace longer (musterd's turn); musterd's
// CaptureHang stops every local worker as hung with musterd's reason.
TEST_F(ElasticAgentTest, CaptureHangStopsEveryWorkerWithMusterdsReason) {
  config_.worker_timeout = absl::Seconds(5);
  StartAgent();
  v1::ServerMessage ready = RoundReady(1, config_.nproc_per_node);
  ready.mutable_round_ready()->set_progress_watched(true);
  server_.Push(ready);
  auto workers = launcher_.WaitForGroup(1, kDeadline);
  ASSERT_NE(workers, nullptr);
  // 6 s of silence: past the timeout, inside the grace (max(2 s, lease/2)).
  for (int i = 0; i < 6; ++i) {
    clock_.Advance(absl::Seconds(1));
    EXPECT_FALSE(
        server_
            .WaitFor(v1::AgentMessage::kWorkersFailed, absl::Milliseconds(50))
            .has_value())
        << "the watchdog fired " << i + 1 << " s in, within musterd's grace";
  }
  const std::string why =
      "musterd saw no progress from any rank of job j for 5s "
      "(--worker-timeout)";
  v1::ServerMessage hang;
  hang.mutable_capture_hang()->set_round(1);
  hang.mutable_capture_hang()->set_reason(why);
  server_.Push(hang);
  std::optional<v1::AgentMessage> report =
      server_.WaitFor(v1::AgentMessage::kWorkersFailed, kDeadline);
  ASSERT_TRUE(report.has_value());
  ASSERT_EQ(report->workers_failed().failures_size(), 2);
  for (const v1::WorkerFailure& f : report->workers_failed().failures()) {
    EXPECT_EQ(f.signal(), platform::kSignalKill);
    EXPECT_EQ(f.error_message(), "hung: " + why);
  }
  EXPECT_EQ(workers->kills().size(), 2u);
  server_.Push(JobFailed("hung"));
  EXPECT_EQ(WaitForExit(), kExitJobFailed);
}

// The straggler policy travels in the Join; musterd's Excluded for the running
// round stops the workers (grace, then kill), leaves with the reason and ends
// the launcher with exit 5, without a worker report.
TEST_F(ElasticAgentTest, ExcludedStopsTheWorkersLeavesAndExitsFive) {
  config_.straggler_action = StragglerAction::kExclude;
  config_.straggler_threshold = 0.6;
  config_.straggler_window = absl::Seconds(30);
  config_.exclude_cooldown = absl::Minutes(5);
  config_.exclude_after_failures = 3;
  StartAgent();
  const v1::Join join = server_.first_join();
  EXPECT_EQ(join.straggler_action(), "exclude");
  EXPECT_DOUBLE_EQ(join.straggler_threshold(), 0.6);
  EXPECT_EQ(join.straggler_window_ms(), 30000);
  EXPECT_EQ(join.exclude_cooldown_ms(), 300000);
  EXPECT_EQ(join.exclude_after_failures(), 3);
  auto workers = StartRound(1, 1);
  ASSERT_NE(workers, nullptr);
  workers->IgnoreStopSignals(1);
  v1::ServerMessage excluded;
  excluded.mutable_excluded()->set_round(1);
  excluded.mutable_excluded()->set_reason("straggler, score 0.48");
  excluded.mutable_excluded()->set_score(0.48);
  server_.Push(excluded);
  EXPECT_EQ(WaitForExit(), kExitExcluded);
  ASSERT_EQ(workers->stop_calls().size(), 1u);
  EXPECT_EQ(workers->stop_calls()[0].signal, platform::kSignalTerminate);
  EXPECT_EQ(workers->stop_calls()[0].grace, absl::Seconds(30));
  EXPECT_TRUE(workers->stop_calls()[0].killed_after_grace);
  EXPECT_THAT(server_.leave_reasons(),
              ::testing::ElementsAre("musterd excluded this node from job "
                                     "job: straggler, score 0.48"));
  EXPECT_FALSE(
      server_.WaitFor(v1::AgentMessage::kWorkersFailed, absl::ZeroDuration())
          .has_value());
}

TEST_F(ElasticAgentTest, ProgramThatCannotStartIsAConfigError) {
  StartAgent();
  launcher_.FailNextStart(
      absl::FailedPreconditionError("program 'nope' not found in PATH"));
  server_.Push(RoundReady(1, config_.nproc_per_node));
  EXPECT_EQ(WaitForExit(), kExitConfigError);
  EXPECT_THAT(server_.leave_reasons(),
              ::testing::ElementsAre(HasSubstr("not found in PATH")));
}

// Issue 11: an AgentConfig built in code (not through the flag parser) with
// a job id outside the server's grammar is refused before any connection.
TEST_F(ElasticAgentTest, JobIdOutsideTheGrammarIsRefusedBeforeConnecting) {
  config_.run_id = "a/b";
  int clients = 0;
  AgentDeps deps;
  deps.clock = &clock_;
  deps.launcher = &launcher_;
  deps.new_client = [&](const rendezvous::GrpcClientOptions& o) {
    ++clients;
    return server_.NewClient(o);
  };
  ElasticAgent agent(config_, std::move(deps));
  EXPECT_EQ(agent.Run(), kExitConfigError);
  EXPECT_EQ(clients, 0);
}

}  // namespace
}  // namespace muster::agent
