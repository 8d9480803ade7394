// The platform fakes keep their interfaces' contracts: FakeStopRequests
// delivers a request to the watcher or to Wait, FakeServiceHost records the
// daemon's notices in order.
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "muster/platform/signals.h"
#include "platform/fake/fake_service_host.h"
#include "platform/fake/fake_stop_requests.h"

namespace muster::platform {
namespace {

TEST(FakeStopRequestsTest, WaitReturnsTheRequestsInOrder) {
  FakeStopRequests stops;
  stops.Request(kSignalHangup);
  stops.Request(kSignalTerminate);
  EXPECT_EQ(stops.Wait(), kSignalHangup);
  EXPECT_EQ(stops.Wait(), kSignalTerminate);
}

TEST(FakeStopRequestsTest, TheWatcherGetsEachRequestAndEndsWithTheObject) {
  absl::Mutex mu;
  std::vector<int> seen;
  {
    FakeStopRequests stops;
    stops.StartWatcher([&](int sig) {
      absl::MutexLock lock(&mu);
      seen.push_back(sig);
    });
    stops.Request(kSignalInterrupt);
    stops.Request(kSignalTerminate);
    absl::MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(
        absl::Condition(
            +[](std::vector<int>* s) { return s->size() == 2; }, &seen),
        absl::Seconds(10)));
  }  // joins the watcher
  EXPECT_EQ(seen, (std::vector<int>{kSignalInterrupt, kSignalTerminate}));
}

TEST(FakeServiceHostTest, RecordsNoticesInOrder) {
  FakeServiceHost host(/*managed=*/true, absl::Seconds(4));
  EXPECT_TRUE(host.managed());
  EXPECT_EQ(host.watchdog_interval(), absl::Seconds(4));
  host.Ready("up");
  host.Ping("");
  host.SetStatus("busy");
  host.Stopping("bye");
  const std::vector<FakeServiceHost::Notice> n = host.notices();
  ASSERT_EQ(n.size(), 4u);
  EXPECT_EQ(n[0].kind, FakeServiceHost::Notice::kReady);
  EXPECT_EQ(n[0].status, "up");
  EXPECT_EQ(n[1].kind, FakeServiceHost::Notice::kPing);
  EXPECT_EQ(n[2].kind, FakeServiceHost::Notice::kStatus);
  EXPECT_EQ(n[2].status, "busy");
  EXPECT_EQ(n[3].kind, FakeServiceHost::Notice::kStopping);
  EXPECT_TRUE(
      host.WaitFor(FakeServiceHost::Notice::kPing, 1, absl::ZeroDuration()));
  EXPECT_FALSE(
      host.WaitFor(FakeServiceHost::Notice::kPing, 2, absl::Milliseconds(10)));
  FakeServiceHost unmanaged(/*managed=*/false, absl::ZeroDuration());
  EXPECT_FALSE(unmanaged.managed());
}

}  // namespace
}  // namespace muster::platform
