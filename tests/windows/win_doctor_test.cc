// `muster doctor` on Windows under wine: the system collector (the Windows
// Net and netsh through the Windows ToolRunner) and muster.exe doctor itself.
// Wine has a loopback interface and a netsh without advfirewall (it prints
// nothing), so the report must show the interface and say that the firewall
// could not be read, and why: never crash, hang or pass silently.
#include <windows.h>

#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/doctor/checks.h"
#include "muster/doctor/collector.h"
#include "muster/platform/env.h"
#include "muster/platform/process.h"
#include "nlohmann/json.hpp"
#include "platform/windows/win_util.h"

namespace muster::doctor {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const Check* Find(const Report& r, const std::string& id) {
  for (const Check& c : r.checks) {
    if (c.id == id) return &c;
  }
  return nullptr;
}

// muster.exe, beside this test in the build's bin/.
std::string MusterExe() {
  wchar_t exe[MAX_PATH];
  const DWORD n = GetModuleFileNameW(nullptr, exe, MAX_PATH);
  std::filesystem::path p(std::wstring(exe, n));
  return platform::windows::Narrow((p.parent_path() / L"muster.exe").wstring());
}

TEST(WindowsDoctor, SystemCollectorNamesLoopbackAndAnUnreadableFirewall) {
  Options o;
  o.os = "windows";
  o.ports = {{29400, 29400}};
  auto plan = MakePlan(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const absl::Time start = absl::Now();
  Facts facts =
      NewSystemCollector()->Collect(*plan, platform::CurrentEnvironment());
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
  bool loopback = false;
  for (const auto& a : facts.interfaces) {
    loopback = loopback || (a.loopback && a.address == "127.0.0.1");
  }
  EXPECT_TRUE(loopback);
  EXPECT_TRUE(absl::EndsWithIgnoreCase(facts.host.hosts_path,
                                       "\\System32\\drivers\\etc\\hosts"))
      << facts.host.hosts_path;
  EXPECT_TRUE(facts.firewall.windows);
  EXPECT_TRUE(facts.firewall.netsh_profiles.found);
  const Report report = Diagnose(*plan, facts);
  const Check* fw = Find(report, "firewall");
  ASSERT_NE(fw, nullptr);
  if (facts.firewall.netsh_profiles.output.empty()) {  // wine
    EXPECT_EQ(fw->status, Status::kWarn);
    EXPECT_THAT(fw->summary, StartsWith("could not read the firewall: netsh "
                                        "advfirewall show currentprofile "
                                        "printed nothing"));
    // The rules were not asked for without the profiles.
    EXPECT_FALSE(facts.firewall.netsh_rules.found);
  } else {  // Windows (English)
    EXPECT_THAT(fw->evidence, Contains(StartsWith("Windows Firewall, ")));
  }
  EXPECT_THAT(fw->commands, Contains(StartsWith("New-NetFirewallRule ")));
}

TEST(WindowsDoctor, MusterExeDoctorReportsUnderWine) {
  platform::CommandSpec spec;
  spec.argv = {MusterExe(), "doctor", "--ports", "29400", "--json"};
  spec.env = platform::CurrentEnvironment();
  spec.timeout = absl::Seconds(120);
  spec.max_output = 1 << 20;
  auto r = platform::RunCommand(spec);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_FALSE(r->timed_out);
  // 0 or 1 (a check may fail on this host); never 2 (usage) or a crash.
  EXPECT_TRUE(r->exit_code == 0 || r->exit_code == 1) << r->exit_code;
  nlohmann::json j = nlohmann::json::parse(r->output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r->output;
  EXPECT_EQ(j["os"], "windows");
  EXPECT_EQ(j["exit_status"], r->exit_code);
  bool firewall = false;
  bool loopback = false;
  for (const auto& c : j["checks"]) {
    if (c["id"] == "firewall") {
      firewall = true;
      EXPECT_THAT(c["summary"].get<std::string>(),
                  StartsWith("could not read the firewall: "));
    }
    if (c["id"] == "interfaces") {
      for (const auto& i : c["data"]["interfaces"]) {
        loopback = loopback || i["loopback"].get<bool>();
      }
    }
  }
  EXPECT_TRUE(firewall) << r->output;
  EXPECT_TRUE(loopback) << r->output;
}

}  // namespace
}  // namespace muster::doctor
