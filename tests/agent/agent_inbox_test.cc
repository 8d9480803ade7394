// What the agent's main loop waits on (agent/src/agent_inbox.h): the inbox's
// wakes and sessions, the session pump, and a worker's end waking it
// (LaunchOptions::on_exit, through WorkerGroup::Start) on the OS's launcher
// and on the fake one.
#include "agent/src/agent_inbox.h"

#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "muster/agent/worker_group.h"
#include "muster/platform/clock.h"
#include "muster/platform/signals.h"
#include "platform/fake/fake_process.h"

namespace muster::agent {
namespace {

constexpr absl::Duration kLong = absl::Seconds(10);

v1::ServerMessage Waiting(int joined) {
  v1::ServerMessage msg;
  msg.mutable_waiting()->set_joined(joined);
  return msg;
}

TEST(AgentInbox, WaitReturnsAtOnceAfterAWakeAndClearsIt) {
  AgentInbox inbox;
  inbox.Wake();
  const absl::Time start = absl::Now();
  inbox.Wait(kLong);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // The wake was taken: the next wait runs to its timeout.
  const absl::Time again = absl::Now();
  inbox.Wait(absl::Milliseconds(50));
  EXPECT_GE(absl::Now() - again, absl::Milliseconds(45));
}

TEST(AgentInbox, MessagesOfTheCurrentSessionOnlyInOrder) {
  AgentInbox inbox;
  const uint64_t first = inbox.OpenSession();
  inbox.Push(first, Waiting(1));
  const uint64_t second = inbox.OpenSession();  // drops session 1's
  inbox.Push(first, Waiting(2));                // a late word of session 1
  inbox.Push(second, Waiting(3));
  inbox.Push(second, absl::UnavailableError("gone"));
  inbox.Wait(kLong);  // a message is queued: at once
  std::optional<AgentInbox::Item> a = inbox.Take();
  ASSERT_TRUE(a.has_value() && a->ok());
  EXPECT_EQ((*a)->waiting().joined(), 3);
  std::optional<AgentInbox::Item> b = inbox.Take();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(inbox.Take().has_value());
}

// A session the test plays: Next hands out what was queued, then waits.
class ScriptedClient : public rendezvous::RendezvousClient {
 public:
  void Queue(absl::StatusOr<v1::ServerMessage> item) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(item));
  }
  absl::Status Start(const v1::Join&) override { return absl::OkStatus(); }
  absl::Status Send(const v1::AgentMessage&) override {
    return absl::OkStatus();
  }
  absl::StatusOr<v1::ServerMessage> Next(absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !queue_.empty();
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) {
      return absl::DeadlineExceededError("none");
    }
    absl::StatusOr<v1::ServerMessage> item = std::move(queue_.front());
    queue_.pop_front();
    return item;
  }
  void SetRound(int64_t) override {}
  void CloseWith(const v1::Leave&) override {}

 private:
  absl::Mutex mu_;
  std::deque<absl::StatusOr<v1::ServerMessage>> queue_ ABSL_GUARDED_BY(mu_);
};

// Waits (real time) for the inbox's next message.
std::optional<AgentInbox::Item> Next(AgentInbox& inbox) {
  const absl::Time deadline = absl::Now() + kLong;
  while (absl::Now() < deadline) {
    if (auto item = inbox.Take()) return item;
    inbox.Wait(absl::Milliseconds(100));
  }
  return std::nullopt;
}

TEST(SessionPump, PumpsMessagesInOrderUntilTheSessionEnds) {
  AgentInbox inbox;
  ScriptedClient client;
  SessionPump pump(&client, &inbox);
  client.Queue(Waiting(1));
  client.Queue(Waiting(2));
  client.Queue(absl::UnavailableError("stream broken"));
  client.Queue(Waiting(9));  // after the end: never read
  for (int joined : {1, 2}) {
    std::optional<AgentInbox::Item> item = Next(inbox);
    ASSERT_TRUE(item.has_value() && item->ok());
    EXPECT_EQ((*item)->waiting().joined(), joined);
  }
  std::optional<AgentInbox::Item> end = Next(inbox);
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->status().code(), absl::StatusCode::kUnavailable);
  inbox.Wait(absl::Milliseconds(300));
  EXPECT_FALSE(inbox.Take().has_value());
}

TEST(SessionPump, NothingIsPushedAfterRequestStop) {
  AgentInbox inbox;
  ScriptedClient client;
  auto pump = std::make_unique<SessionPump>(&client, &inbox);
  pump->RequestStop();
  client.Queue(absl::CancelledError("closed by this agent"));
  pump.reset();  // joins
  EXPECT_FALSE(inbox.Take().has_value());
}

// A worker's end wakes the inbox: the real launcher's reaper thread calls
// the hook, so the loop needs no poll.
TEST(WorkerExitWake, TheOsLauncherWakesOnAWorkersEnd) {
  auto inbox = std::make_shared<AgentInbox>();
  std::vector<WorkerSpec> workers(1);
  workers[0].argv = {"/bin/sh", "-c", "sleep 0.2; exit 3"};
  workers[0].env = {{"PATH", "/usr/bin:/bin"}};
  OutputOptions output;
  output.redirects[-1] = kStdAll;
  output.attempt_dir =
      (std::filesystem::temp_directory_path() /
       absl::StrCat("muster-inbox-test-", absl::ToUnixNanos(absl::Now())))
          .string();
  auto group = WorkerGroup::Start(platform::ProcessLauncher::Default(),
                                  std::move(workers), output,
                                  [inbox] { inbox->Wake(); });
  ASSERT_TRUE(group.ok()) << group.status();
  const absl::Time start = absl::Now();
  inbox->Wait(kLong);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ((*group)->Poll().state, GroupState::kFailed);
  (*group)->Stop(platform::kSignalTerminate, absl::Seconds(1));
  std::error_code ec;
  std::filesystem::remove_all(output.attempt_dir, ec);
}

TEST(WorkerExitWake, TheFakeLauncherWakesOnExitKillAndStop) {
  FakeClock clock;
  platform::FakeProcessLauncher launcher(&clock);
  auto inbox = std::make_shared<AgentInbox>();
  std::vector<WorkerSpec> workers(3);
  for (size_t i = 0; i < workers.size(); ++i) {
    workers[i].local_rank = static_cast<int>(i);
    workers[i].argv = {"/bin/true"};
  }
  auto group = WorkerGroup::Start(&launcher, std::move(workers), {},
                                  [inbox] { inbox->Wake(); });
  ASSERT_TRUE(group.ok()) << group.status();
  std::shared_ptr<platform::FakeProcesses> procs = launcher.groups().at(0);
  auto woken = [&inbox] {
    const absl::Time start = absl::Now();
    inbox->Wait(kLong);
    return absl::Now() - start < absl::Seconds(5);
  };
  procs->Exit(0, 0);
  EXPECT_TRUE(woken());
  EXPECT_TRUE((*group)->Kill(1, "hung"));
  EXPECT_TRUE(woken());
  (*group)->Stop(platform::kSignalTerminate, absl::Seconds(1));
  EXPECT_TRUE(woken());
}

}  // namespace
}  // namespace muster::agent
