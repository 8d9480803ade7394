// The service host on Windows (under wine, whose service control manager
// runs services as on Windows): console mode, and a real service installed,
// started, stopped through the SCM and uninstalled.
#include <windows.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/platform/service_host.h"
#include "tests/windows/win_test_util.h"

namespace muster::platform {
namespace {

struct Sc {
  explicit Sc(SC_HANDLE h) : h(h) {}
  ~Sc() {
    if (h != nullptr) CloseServiceHandle(h);
  }
  SC_HANDLE h;
};

DWORD StateOf(SC_HANDLE svc) {
  SERVICE_STATUS st{};
  if (!QueryServiceStatus(svc, &st)) return 0;
  return st.dwCurrentState;
}

TEST(RunService, RunsTheBodyInTheConsoleWhenNoManagerStartedUs) {
  bool managed = true;
  const int code = RunService("muster-console-test", [&managed] {
    managed = ServiceHost::Default()->managed();
    ServiceHost::Default()->Ready("console");  // a no-op here
    return 5;
  });
  EXPECT_EQ(code, 5);
  EXPECT_FALSE(managed);
}

TEST(Service, InstallsStartsStopsAndUninstalls) {
  wintest::TempDir dir;
  // A name of this run's own: wine keeps its registry, and a service of an
  // earlier (interrupted, or concurrent in another build directory) run under
  // the same name once made the second install answer OK and the start fail.
  const std::string name =
      absl::StrCat("muster-platform-test-", GetCurrentProcessId());
  (void)UninstallService(name);
  const std::string marker = dir / "marker.txt";
  ServiceInstall spec;
  spec.name = name;
  spec.description = "muster platform test";
  spec.program = wintest::HelperPath();
  spec.args = {"service", name, marker};
  spec.auto_start = false;
  const absl::Status installed = InstallService(spec);
  ASSERT_TRUE(installed.ok()) << installed;
  auto again = InstallService(spec);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(again.message(), ::testing::HasSubstr("--uninstall-service"));

  {
    Sc scm(OpenSCManagerW(nullptr, nullptr, SC_MANAGER_CONNECT));
    ASSERT_NE(scm.h, nullptr);
    Sc svc(OpenServiceW(scm.h, std::wstring(name.begin(), name.end()).c_str(),
                        SERVICE_START | SERVICE_STOP | SERVICE_QUERY_STATUS));
    ASSERT_NE(svc.h, nullptr);
    ASSERT_TRUE(StartServiceW(svc.h, 0, nullptr));
    // RUNNING is reported by the body's Ready (after it "listens").
    EXPECT_TRUE(wintest::WaitUntil(
        [&] { return StateOf(svc.h) == SERVICE_RUNNING; }, absl::Seconds(60)));
    EXPECT_TRUE(wintest::WaitUntil(
        [&] { return wintest::ReadText(marker) == "running managed\n"; },
        absl::Seconds(30)))
        << wintest::ReadText(marker);
    SERVICE_STATUS st{};
    ASSERT_TRUE(ControlService(svc.h, SERVICE_CONTROL_STOP, &st));
    EXPECT_TRUE(wintest::WaitUntil(
        [&] { return StateOf(svc.h) == SERVICE_STOPPED; }, absl::Seconds(30)));
    // The stop reached the body as SIGTERM, the drain musterd does on Linux.
    EXPECT_EQ(wintest::ReadText(marker),
              "running managed\nstopped by SIGTERM\n");
  }
  const absl::Status removed = UninstallService(name);
  ASSERT_TRUE(removed.ok()) << removed;
  auto gone = UninstallService(name);
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace muster::platform
