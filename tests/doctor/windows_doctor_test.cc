// `muster doctor` on Windows, on Linux: the netsh parsers on recorded English
// output (CRLF, as netsh prints it), the firewall check deciding Windows
// Firewall's rules (block before allow, the default inbound action, program
// rules), and the Windows collector over a FakeNet and a FakeToolRunner
// answering as netsh does on Windows and as wine's stub does (nothing).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/doctor/checks.h"
#include "muster/doctor/collector.h"
#include "muster/doctor/firewall.h"
#include "platform/fake/fake_net.h"

namespace muster::doctor {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

std::string Crlf(const std::string& s) {
  return absl::StrReplaceAll(s, {{"\n", "\r\n"}});
}

// `netsh advfirewall show currentprofile` on a Windows 10 host on a private
// network.
const std::string kPrivateOn = Crlf(R"(
Private Profile Settings: 
----------------------------------------------------------------------
State                                 ON
Firewall Policy                       BlockInbound,AllowOutbound
LocalFirewallRules                    N/A (GPO-store only)
LocalConSecRules                      N/A (GPO-store only)
InboundUserNotification               Enable
RemoteManagement                      Disable
UnicastResponseToMulticast            Enable

Logging:
LogAllowedConnections                 Disable
LogDroppedConnections                 Disable
FileName                              %systemroot%\system32\LogFiles\Firewall\pfirewall.log
MaxFileSize                           4096

Ok.

)");

// One rule of `netsh advfirewall firewall show rule ... verbose` as netsh
// lays it out. `limit`: a program's path (a Program line), or "subnet"
// (RemoteIP LocalSubnet).
std::string Rule(const std::string& name, const std::string& action,
                 const std::string& protocol, const std::string& port,
                 const std::string& profiles = "Domain,Private,Public",
                 const std::string& limit = "",
                 const std::string& enabled = "Yes") {
  auto line = [](const std::string& key, const std::string& value) {
    std::string l = key + ":";
    l.resize(38, ' ');
    return l + value + "\n";
  };
  return "\n" + line("Rule Name", name) + std::string(70, '-') + "\n" +
         line("Enabled", enabled) + line("Direction", "In") +
         line("Profiles", profiles) + line("LocalIP", "Any") +
         line("RemoteIP", limit == "subnet" ? "LocalSubnet" : "Any") +
         line("Protocol", protocol) + line("LocalPort", port) +
         line("RemotePort", "Any") + line("Edge traversal", "No") +
         (limit.empty() || limit == "subnet" ? "" : line("Program", limit)) +
         line("InterfaceTypes", "Any") + line("Security", "NotRequired") +
         line("Rule source", "Local Setting") + line("Action", action);
}

// `netsh advfirewall firewall show rule name=all dir=in verbose`, abridged:
// a UDP rule (verbatim), a disabled one, a keyword port, WinRM, a program
// rule for musterd, an allow and (listed after it) a block rule on 29500, a
// rule for the local subnet only, and one for the public profile only.
const std::string kRules = Crlf(
    R"(
Rule Name:                            Core Networking - Teredo (UDP-In)
----------------------------------------------------------------------
Description:                          Inbound UDP rule to allow Teredo edge traversal.
Enabled:                              Yes
Direction:                            In
Profiles:                             Domain,Private,Public
Grouping:                             Core Networking
LocalIP:                              Any
RemoteIP:                             Any
Protocol:                             UDP
LocalPort:                            Teredo
RemotePort:                           Any
Edge traversal:                       Yes
Program:                              %SystemRoot%\system32\svchost.exe
Service:                              iphlpsvc
InterfaceTypes:                       Any
Security:                             NotRequired
Rule source:                          Local Setting
Action:                               Allow
)" +
    Rule("Remote Desktop - User Mode (TCP-In)", "Allow", "TCP", "3389",
         "Domain,Private,Public", "", "No") +
    Rule("Core Networking - IPHTTPS (TCP-In)", "Allow", "TCP", "IPHTTPS") +
    Rule("Windows Remote Management (HTTP-In)", "Allow", "TCP", "5985",
         "Domain,Private", "System") +
    Rule("musterd (TCP 29400)", "Allow", "TCP", "29400",
         "Domain,Private,Public", "C:\\Program Files\\muster\\musterd.exe") +
    Rule("open 29500-29510", "Allow", "TCP", "29500-29510,8080") +
    Rule("no 29500", "Block", "Any", "29500") +
    Rule("jupyter", "Allow", "TCP", "8888", "Private", "subnet") +
    Rule("public web", "Allow", "TCP", "8081", "Public") + "Ok.\n\n");

// `netsh int ipv4 show dynamicport tcp` after an administrator moved it.
const std::string kDynamicPorts = Crlf(R"(
Protocol tcp Dynamic Port Range
---------------------------------
Start Port      : 50000
Number of Ports : 10000

)");

platform::ToolResult Tool(const std::string& output, int exit_code = 0) {
  platform::ToolResult r;
  r.found = true;
  r.exit_code = exit_code;
  r.output = output;
  r.path = "C:\\Windows\\system32\\netsh.exe";
  return r;
}

FirewallFacts WindowsFacts(const std::string& profiles,
                           const std::string& rules) {
  FirewallFacts f;
  f.windows = true;
  f.ephemeral = {49152, 65535};
  f.netsh_profiles = Tool(profiles);
  f.netsh_rules = Tool(rules);
  return f;
}

// ---- the parsers ----

TEST(NetshParseTest, CurrentProfileAndAllProfiles) {
  auto p = ParseNetshProfiles(kPrivateOn);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 1u);
  EXPECT_EQ((*p)[0].name, "Private");
  EXPECT_TRUE((*p)[0].on);
  EXPECT_EQ((*p)[0].inbound, "BlockInbound");

  const std::string all = Crlf(
      "\nDomain Profile Settings: \n---------\nState                   ON\n"
      "Firewall Policy         AllowInbound,AllowOutbound\n\n"
      "Private Profile Settings: \n---------\nState                   ON\n"
      "Firewall Policy         BlockInboundAlways,AllowOutbound\n\n"
      "Public Profile Settings: \n---------\nState                   OFF\n"
      "Firewall Policy         BlockInbound,AllowOutbound\nOk.\n");
  p = ParseNetshProfiles(all);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 3u);
  EXPECT_EQ((*p)[0].inbound, "AllowInbound");
  EXPECT_EQ((*p)[1].inbound, "BlockInboundAlways");
  EXPECT_EQ((*p)[2].name, "Public");
  EXPECT_FALSE((*p)[2].on);
}

TEST(NetshParseTest, NothingOrAnotherLanguageIsNamedNotGuessed) {
  auto empty = ParseNetshProfiles("\r\n");
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(),
              HasSubstr("netsh advfirewall show currentprofile printed "
                        "nothing (wine's netsh does so"));
  // German Windows.
  auto german = ParseNetshProfiles(Crlf(
      "\nEinstellungen für privates Profil:\n-----------\nStatus      EIN\n"));
  ASSERT_FALSE(german.ok());
  EXPECT_THAT(german.status().message(),
              HasSubstr("printed no 'Profile Settings:' (netsh in another "
                        "language?"));
  auto rules = ParseNetshRules(
      Crlf("\nRegelname:      musterd\n----\nAktiviert:     Ja\n"), {});
  ASSERT_FALSE(rules.ok());
  EXPECT_THAT(rules.status().message(), HasSubstr("printed no 'Rule Name:'"));
  auto none =
      ParseNetshRules(Crlf("\nNo rules match the specified criteria.\n"),
                      {{"Private", true, "BlockInbound"}});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_THAT(none->rules, IsEmpty());
  ASSERT_EQ(none->chains.size(), 1u);
  EXPECT_EQ(none->chains[0].policy, "DROP");
}

TEST(NetshParseTest, RulesOfTheActiveProfileBlockFirst) {
  auto rules = ParseNetshRules(kRules, {{"Private", true, "BlockInbound"}});
  ASSERT_TRUE(rules.ok()) << rules.status();
  ASSERT_EQ(rules->chains.size(), 1u);
  EXPECT_EQ(rules->chains[0].source, "netsh");
  EXPECT_TRUE(rules->chains[0].input_hook);
  // Left out: UDP, disabled, a keyword port, the Public-only rule.
  std::vector<std::string> texts;
  for (const FirewallRule& r : rules->rules) texts.push_back(r.text);
  EXPECT_THAT(
      texts,
      ::testing::ElementsAre(
          "Windows Firewall rule \"no 29500\" (Block any protocol port 29500)",
          "Windows Firewall rule \"Windows Remote Management (HTTP-In)\" "
          "(Allow TCP port 5985, program System)",
          "Windows Firewall rule \"musterd (TCP 29400)\" (Allow TCP port "
          "29400, program C:\\Program Files\\muster\\musterd.exe)",
          "Windows Firewall rule \"open 29500-29510\" (Allow TCP port "
          "29500-29510,8080)",
          "Windows Firewall rule \"jupyter\" (Allow TCP port 8888, remoteip "
          "LocalSubnet)"));
  EXPECT_TRUE(rules->rules[1].conditional);  // program System
  EXPECT_FALSE(rules->rules[3].conditional);
  ASSERT_EQ(rules->rules[3].dports.size(), 2u);
  EXPECT_EQ(rules->rules[3].dports[0].last, 29510);
}

TEST(NetshParseTest, DynamicPorts) {
  auto r = ParseNetshDynamicPorts(kDynamicPorts);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->first, 50000);
  EXPECT_EQ(r->last, 59999);
  EXPECT_FALSE(ParseNetshDynamicPorts("").has_value());
  EXPECT_FALSE(ParseNetshDynamicPorts(
                   "Start Port : 65000\r\nNumber of Ports : 16384\r\n")
                   .has_value());
}

// ---- FirewallCheck on Windows facts ----

TEST(WindowsFirewallCheckTest, ABlockRuleWinsOverAnAllowListedBeforeIt) {
  const FirewallFacts f = WindowsFacts(kPrivateOn, kRules);
  Check c = FirewallCheck({{29500, 29500}}, f, "windows", false);
  EXPECT_EQ(c.status, Status::kFail);
  EXPECT_EQ(c.summary, "this host's firewall blocks inbound TCP 29500");
  EXPECT_THAT(c.evidence,
              Contains("blocks TCP 29500: Windows Firewall rule \"no 29500\" "
                       "(Block any protocol port 29500)"));
  EXPECT_THAT(c.evidence,
              Contains("Windows Firewall, Private profile (active): on, "
                       "default inbound action BlockInbound"));
  // None of the Linux tools is mentioned.
  EXPECT_THAT(c.evidence, Not(Contains(HasSubstr("iptables"))));
  EXPECT_THAT(c.commands,
              Contains("New-NetFirewallRule -DisplayName \"muster TCP 29500\" "
                       "-Direction Inbound -Protocol TCP -LocalPort 29500 "
                       "-Action Allow"));
  EXPECT_THAT(c.commands,
              Contains("netsh advfirewall firewall add rule name=\"muster TCP "
                       "29500\" dir=in action=allow protocol=TCP "
                       "localport=29500"));
  EXPECT_EQ(c.data["tools"]["netsh"]["rules"], 5);
}

TEST(WindowsFirewallCheckTest, DefaultActionProgramRuleAndOpenPorts) {
  const FirewallFacts f = WindowsFacts(kPrivateOn, kRules);
  Check c = FirewallCheck({{29401, 29402}}, f, "windows", false);
  EXPECT_EQ(c.status, Status::kFail);
  EXPECT_THAT(c.evidence,
              Contains("blocks TCP 29401-29402: Windows Firewall, Private "
                       "profile: default inbound action Block"));
  EXPECT_THAT(c.commands, Contains(HasSubstr("-LocalPort \"29401-29402\"")));
  // Gloo's ephemeral ports are blocked too.
  EXPECT_THAT(c.evidence, Contains(HasSubstr("(49152-65535, the dynamic port "
                                             "range), and Windows Firewall")));
  // A rule for musterd.exe only may let a peer in: a warning.
  Check program = FirewallCheck({{29400, 29400}}, f, "windows", false);
  EXPECT_EQ(program.status, Status::kWarn);
  EXPECT_THAT(program.summary,
              HasSubstr("default inbound action Block (unless accepted by "
                        "Windows Firewall rule \"musterd (TCP 29400)\""));
  Check open = FirewallCheck({{29501, 29510}}, f, "windows", false);
  EXPECT_THAT(open.data["decisions"], IsEmpty());
  // (The ephemeral ports stay blocked: a warning on one node.)
  EXPECT_EQ(open.status, Status::kWarn);
  EXPECT_THAT(open.summary, HasSubstr("ephemeral ports"));
}

TEST(WindowsFirewallCheckTest, OffOrAllowInboundPasses) {
  const std::string off = absl::StrReplaceAll(
      kPrivateOn, {{"State                                 ON",
                    "State                                 OFF"}});
  Check c =
      FirewallCheck({{29500, 29500}}, WindowsFacts(off, ""), "windows", true);
  EXPECT_EQ(c.status, Status::kPass);
  EXPECT_EQ(c.summary, "no local rule blocks inbound TCP 29500");
  EXPECT_THAT(c.evidence, Contains("Windows Firewall, Private profile "
                                   "(active): off"));
  const std::string allow =
      absl::StrReplaceAll(kPrivateOn, {{"BlockInbound,", "AllowInbound,"}});
  Check a = FirewallCheck({{29401, 29401}}, WindowsFacts(allow, kRules),
                          "windows", true);
  EXPECT_EQ(a.status, Status::kPass);
}

TEST(WindowsFirewallCheckTest, BlockInboundAlwaysIgnoresAllowRules) {
  const std::string shields = absl::StrReplaceAll(
      kPrivateOn, {{"BlockInbound,", "BlockInboundAlways,"}});
  Check c = FirewallCheck({{29505, 29505}}, WindowsFacts(shields, kRules),
                          "windows", false);
  EXPECT_EQ(c.status, Status::kFail);
}

TEST(WindowsFirewallCheckTest, UnreadableFirewallWarnsWithWhy) {
  // wine: netsh exits 0 and prints nothing.
  FirewallFacts f = WindowsFacts("", "");
  f.netsh_rules = {};
  Check c = FirewallCheck({{29400, 29400}}, f, "windows", true);
  EXPECT_EQ(c.status, Status::kWarn);
  EXPECT_THAT(c.summary,
              StartsWith("could not read the firewall: netsh advfirewall show "
                         "currentprofile printed nothing"));
  EXPECT_EQ(c.data["tools"]["netsh"], "unreadable");
  EXPECT_THAT(c.commands, Contains(StartsWith("New-NetFirewallRule")));
  // The profiles read, the rules not (a timeout): the rules are unknown.
  f = WindowsFacts(kPrivateOn, "");
  f.netsh_rules.timed_out = true;
  c = FirewallCheck({{29400, 29400}}, f, "windows", true);
  EXPECT_EQ(c.status, Status::kWarn);
  EXPECT_EQ(c.summary,
            "could not read the firewall: netsh advfirewall firewall show "
            "rule: no answer in 5 s");
  // netsh missing altogether.
  f = FirewallFacts();
  f.windows = true;
  c = FirewallCheck({{29400, 29400}}, f, "windows", true);
  EXPECT_THAT(c.summary, StartsWith("could not read the firewall: netsh was "
                                    "not found"));
}

// ---- the Windows collector over fakes ----

class WindowsCollectorTest : public ::testing::Test {
 protected:
  WindowsCollectorTest() {
    net_.hostname = "WINNODE1";
    net_.AddInterface("Loopback Pseudo-Interface 1", "127.0.0.1", 8)
        .AddInterface("Ethernet 2", "10.0.0.5", 24);
    platform::Resolution me;
    me.ok = true;
    me.addresses = {"10.0.0.5"};
    net_.resolutions["WINNODE1"] = me;
    hosts_ = ::testing::TempDir() + "windows_doctor_test_hosts";
    std::ofstream(hosts_, std::ios::binary) << Crlf(
        "# Copyright (c) 1993-2009 Microsoft Corp.\n"
        "127.0.0.1       localhost\n10.0.0.5 winnode1\n");
  }
  ~WindowsCollectorTest() override { std::remove(hosts_.c_str()); }

  Report Run(Facts* facts_out, std::string hosts = "") {
    Options o;
    o.os = "windows";
    o.ports = {{29500, 29500}};
    auto plan = MakePlan(o);
    EXPECT_TRUE(plan.ok()) << plan.status();
    WindowsCollectorOptions wo;
    wo.hosts_file = hosts.empty() ? hosts_ : hosts;
    auto collector = NewWindowsCollector(net_, tools_, wo);
    *facts_out = collector->Collect(
        *plan, {{"Path", "C:\\Windows\\system32"}, {"SystemRoot", "D:\\Win"}});
    return Diagnose(*plan, *facts_out);
  }

  // The check `id` of `r` (a failure, and an empty check, when absent).
  static Check Get(const Report& r, const std::string& id) {
    auto it = std::find_if(r.checks.begin(), r.checks.end(),
                           [&](const Check& c) { return c.id == id; });
    EXPECT_TRUE(it != r.checks.end()) << "no check " << id;
    return it == r.checks.end() ? Check() : *it;
  }

  platform::FakeNet net_;
  platform::FakeToolRunner tools_;
  std::string hosts_;
};

TEST_F(WindowsCollectorTest, ReadsNetshAndTheHostsFile) {
  tools_.Set("netsh advfirewall show currentprofile", kPrivateOn);
  tools_.Set("netsh advfirewall firewall show rule name=all dir=in verbose",
             kRules);
  tools_.Set("netsh int ipv4 show dynamicport tcp", kDynamicPorts);
  Facts facts;
  Report r = Run(&facts);
  EXPECT_TRUE(facts.firewall.windows);
  EXPECT_FALSE(facts.firewall.iptables.found);  // no Linux tool was run
  EXPECT_THAT(tools_.ran, Not(Contains("iptables -S")));
  EXPECT_EQ(facts.firewall.ephemeral.first, 50000);
  EXPECT_EQ(facts.firewall.ephemeral.last, 59999);
  EXPECT_EQ(facts.host.hosts_path, hosts_);
  EXPECT_THAT(facts.host.hosts_file, HasSubstr("10.0.0.5 winnode1"));
  ASSERT_EQ(facts.interfaces.size(), 2u);
  EXPECT_TRUE(facts.interfaces[0].loopback);
  const Check fw = Get(r, "firewall");
  EXPECT_EQ(fw.status, Status::kFail);  // the "no 29500" rule
  EXPECT_THAT(fw.evidence, Contains(HasSubstr("rule \"no 29500\"")));
  EXPECT_THAT(fw.commands, Contains(StartsWith("New-NetFirewallRule")));
  // The host name's line in the hosts file (CRLF), by its Windows path.
  EXPECT_THAT(Get(r, "hostname").evidence,
              Contains(hosts_ + ":3: 10.0.0.5 winnode1"));
  // No /proc or libcuda.so.1 talk on Windows.
  EXPECT_EQ(Get(r, "gpu").status, Status::kInfo);
  EXPECT_THAT(Get(r, "gpu").summary,
              StartsWith("not checked: muster doctor does not read GPUs on "
                         "Windows yet"));
}

TEST_F(WindowsCollectorTest, WinesSilentNetshIsReportedNotGuessed) {
  tools_.Set("netsh advfirewall show currentprofile", "");
  tools_.Set("netsh int ipv4 show dynamicport tcp", "");
  Facts facts;
  Report r = Run(&facts, "/nonexistent/hosts");
  // Without the profiles the rules are not asked for.
  EXPECT_THAT(tools_.ran,
              ::testing::ElementsAre("netsh advfirewall show currentprofile",
                                     "netsh int ipv4 show dynamicport tcp"));
  EXPECT_EQ(facts.firewall.ephemeral.first, 49152);  // Windows' default
  const Check fw = Get(r, "firewall");
  EXPECT_EQ(fw.status, Status::kWarn);
  EXPECT_THAT(fw.summary, StartsWith("could not read the firewall: netsh "
                                     "advfirewall show currentprofile "
                                     "printed nothing"));
  EXPECT_EQ(facts.host.hosts_file, "");
}

TEST_F(WindowsCollectorTest, TheHostsFileIsUnderSystemRoot) {
  Options o;
  o.os = "windows";
  auto plan = MakePlan(o);
  ASSERT_TRUE(plan.ok());
  auto collector = NewWindowsCollector(net_, tools_);
  Facts f = collector->Collect(*plan, {{"SYSTEMROOT", "D:\\Win"}});
  EXPECT_EQ(f.host.hosts_path, "D:\\Win\\System32\\drivers\\etc\\hosts");
  f = collector->Collect(*plan, {});
  EXPECT_EQ(f.host.hosts_path, "C:\\Windows\\System32\\drivers\\etc\\hosts");
  // netsh not there at all: unknown, with why.
  EXPECT_EQ(
      FirewallCheck({{29400, 29400}}, f.firewall, "windows", false).status,
      Status::kWarn);
}

}  // namespace
}  // namespace muster::doctor
