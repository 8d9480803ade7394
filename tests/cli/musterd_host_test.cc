// musterd's service notifications and stop-request loop on the platform fakes:
// what a service manager would be told, and which stop requests end the wait.
#include "cli/musterd_host.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/common/logging.h"
#include "muster/platform/signals.h"
#include "platform/fake/fake_event_log.h"
#include "platform/fake/fake_service_host.h"
#include "platform/fake/fake_stop_requests.h"

namespace muster::cli {
namespace {

using platform::FakeServiceHost;
using Notice = FakeServiceHost::Notice;

TEST(ServiceNotifierTest, ReadyThenWatchdogPingsWithTheChangedStatus) {
  FakeServiceHost host(/*managed=*/true, absl::Milliseconds(100));
  std::atomic<int> jobs{0};
  ServiceNotifier notifier(
      &host, [&] { return absl::StrCat(jobs.load(), " job(s)"); });
  // Pings every 50 ms; "within 5 s" leaves room for a loaded machine.
  ASSERT_TRUE(host.WaitFor(Notice::kPing, 2, absl::Seconds(5)));
  jobs = 3;
  ASSERT_TRUE(host.WaitFor(Notice::kPing, 5, absl::Seconds(5)));
  notifier.Stop();
  const std::vector<Notice> n = host.notices();
  ASSERT_GE(n.size(), 6u);
  EXPECT_EQ(n[0].kind, Notice::kReady);
  EXPECT_EQ(n[0].status, "0 job(s)");
  bool saw_three = false;
  for (size_t i = 1; i < n.size(); ++i) {
    EXPECT_EQ(n[i].kind, Notice::kPing);
    // A ping carries a status line only when it changed.
    EXPECT_TRUE(n[i].status.empty() || n[i].status == "0 job(s)" ||
                n[i].status == "3 job(s)")
        << n[i].status;
    saw_three |= n[i].status == "3 job(s)";
  }
  EXPECT_TRUE(saw_three);
  // Stopped: no ping after the n.size() - 1 above.
  EXPECT_FALSE(host.WaitFor(Notice::kPing, static_cast<int>(n.size()),
                            absl::Milliseconds(300)));
}

TEST(ServiceNotifierTest, WithoutAServiceManagerNothingIsSent) {
  FakeServiceHost host(/*managed=*/false, absl::Milliseconds(100));
  int asked = 0;
  {
    ServiceNotifier notifier(&host, [&] {
      ++asked;
      return std::string("x");
    });
  }
  EXPECT_TRUE(host.notices().empty());
  EXPECT_EQ(asked, 0);
}

TEST(ServiceNotifierTest, WithoutAWatchdogOnlyReadyUntilTheStatusPeriod) {
  FakeServiceHost host(/*managed=*/true, absl::ZeroDuration());
  ServiceNotifier notifier(&host, [] { return std::string("idle"); });
  // The next STATUS= would come after kStatusPeriod (5 s): no ping, ever.
  EXPECT_FALSE(host.WaitFor(Notice::kPing, 1, absl::Milliseconds(200)));
  notifier.Stop();
  const std::vector<Notice> n = host.notices();
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0].kind, Notice::kReady);
  EXPECT_EQ(n[0].status, "idle");
}

TEST(WaitForStopTest, HangupsRunTheReloadAndTheFirstOtherSignalEndsTheWait) {
  platform::FakeStopRequests stops;
  stops.Request(platform::kSignalHangup);
  stops.Request(platform::kSignalHangup);
  stops.Request(platform::kSignalTerminate);
  stops.Request(platform::kSignalInterrupt);
  int reloads = 0;
  EXPECT_EQ(WaitForStop(stops, [&] { ++reloads; }), platform::kSignalTerminate);
  EXPECT_EQ(reloads, 2);
  // The next request is left for the next wait.
  EXPECT_EQ(WaitForStop(stops, [&] { ++reloads; }), platform::kSignalInterrupt);
  EXPECT_EQ(reloads, 2);
}

using ::testing::ElementsAre;

TEST(ServiceArgumentsTest, DropsTheInstallFlagsAndNamesTheServiceLast) {
  EXPECT_THAT(
      ServiceArguments({"--listen=0.0.0.0:29500", "--install-service",
                        "--service-name", "rdzv", "--state-dir=C:/m", "-v"},
                       "rdzv"),
      ElementsAre("--listen=0.0.0.0:29500", "--state-dir=C:/m", "-v",
                  "--service-name=rdzv"));
  EXPECT_THAT(ServiceArguments({"--install-service=true", "--service-name=old",
                                "--uninstall-service"},
                               "musterd"),
              ElementsAre("--service-name=musterd"));
}

TEST(ServiceArgumentsTest, ServiceNameFromArgsTakesTheLastOne) {
  EXPECT_EQ(ServiceNameFromArgs({}), "musterd");
  EXPECT_EQ(ServiceNameFromArgs({"--listen=x:1", "--service-name=a"}), "a");
  EXPECT_EQ(ServiceNameFromArgs({"--service-name=a", "--service-name", "b"}),
            "b");
  // A dangling flag without its value leaves the default.
  EXPECT_EQ(ServiceNameFromArgs({"--service-name"}), "musterd");
}

TEST(ServiceArgumentsTest, RelativePathFlagsAreNamed) {
  auto absolute = [](const std::string& p) {
    return !p.empty() && (p[0] == '/' || (p.size() > 2 && p[1] == ':'));
  };
  EXPECT_THAT(
      RelativePathFlags({"--port-file=port.txt", "--state-dir", "C:/state",
                         "--tls-cert", "cert.pem", "--listen=0.0.0.0:1",
                         "--log-file=/var/log/m", "--config=musterd.conf"},
                        absolute),
      ElementsAre("--port-file=port.txt", "--tls-cert=cert.pem",
                  "--config=musterd.conf"));
  EXPECT_THAT(RelativePathFlags({"--admin-token-file=/etc/t"}, absolute),
              ElementsAre());
}

TEST(LogToFileTest, AppendsEveryLineAndRefusesADirectory) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/musterd_host_test.log";
  std::filesystem::remove(path);
  ASSERT_TRUE(LogToFile(path).ok());
  MUSTER_LOG(INFO) << "first line";
  MUSTER_LOG(WARNING) << "second line";
  SetLogSink(nullptr);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(), ::testing::HasSubstr("INFO [musterd] first line\n"));
  EXPECT_THAT(text.str(),
              ::testing::HasSubstr("WARNING [musterd] second line\n"));
  const absl::Status bad = LogToFile(dir);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), ::testing::HasSubstr("--log-file="));
}

TEST(EventKindOfTest, ErrorsWarningsStartStopAndFailedJobsAreEvents) {
  using platform::EventKind;
  EXPECT_EQ(EventKindOf(LogLevel::kError, "cannot listen"), EventKind::kError);
  EXPECT_EQ(EventKindOf(LogLevel::kWarning, "x"), EventKind::kWarning);
  EXPECT_EQ(EventKindOf(LogLevel::kInfo,
                        "musterd listening on 0.0.0.0:29400 (plaintext)"),
            EventKind::kInformation);
  EXPECT_EQ(EventKindOf(LogLevel::kInfo, "musterd stopped"),
            EventKind::kInformation);
  EXPECT_EQ(EventKindOf(LogLevel::kInfo,
                        "job train: FAILED in round 2: rank 3 exited 1"),
            EventKind::kError);
  EXPECT_EQ(EventKindOf(LogLevel::kInfo, "job train: round 1 formed"),
            std::nullopt);
  EXPECT_EQ(EventKindOf(LogLevel::kDebug, "musterd stopped"), std::nullopt);
}

TEST(LogToTest, ReportsThePickedLinesToTheEventLogWithoutAFile) {
  auto events = std::make_shared<platform::FakeEventLog>();
  ASSERT_TRUE(LogTo("", events).ok());
  MUSTER_LOG(INFO) << "musterd listening on 127.0.0.1:1";
  MUSTER_LOG(INFO) << "job j: round 1 formed";
  MUSTER_LOG(INFO) << "job j: FAILED in round 1: rank 0 exited 1";
  MUSTER_LOG(ERROR) << "boom";
  SetLogSink(nullptr);
  const std::vector<platform::FakeEventLog::Event> got = events->events();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].kind, platform::EventKind::kInformation);
  EXPECT_EQ(got[0].message, "musterd listening on 127.0.0.1:1");
  EXPECT_EQ(got[1].kind, platform::EventKind::kError);
  EXPECT_EQ(got[1].message, "job j: FAILED in round 1: rank 0 exited 1");
  EXPECT_EQ(got[2].kind, platform::EventKind::kError);
  EXPECT_EQ(got[2].message, "boom");
}

}  // namespace
}  // namespace muster::cli
