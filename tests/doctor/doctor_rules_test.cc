// The rules `muster doctor` applies, on synthetic input: NCCL's and Gloo's
// interface choice, port ranges, firewall rule parsing and decisions, the
// commands that open ports, the table and JSON output, and the probe's words.
// Plus probes of loopback, which need no privileges.

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "cli/doctor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/common/net.h"
#include "muster/common/probe.h"
#include "muster/doctor/firewall.h"
#include "muster/doctor/interfaces.h"
#include "muster/doctor/ports.h"
#include "muster/doctor/render.h"
#include "muster/doctor/report.h"
#include "platform/fake/fake_net.h"
#include "tests/testing/tcp_listener.h"

namespace muster::doctor {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// A port and what the firewall is expected to decide for it: the kind, and a
// part of the deciding rule or policy (empty: not checked).
struct PortCase {
  PortCase(int port, PortDecision::Kind kind, std::string by = "")
      : port(port), kind(kind), by(std::move(by)) {}
  int port;
  PortDecision::Kind kind;
  std::string by;
};

void ExpectDecisions(const FirewallRuleset& rules,
                     const std::vector<PortCase>& cases) {
  for (const PortCase& c : cases) {
    SCOPED_TRACE(absl::StrCat("port ", c.port));
    const PortDecision d = DecidePort(rules, c.port);
    EXPECT_EQ(d.kind, c.kind);
    if (!c.by.empty()) {
      EXPECT_THAT(d.by, HasSubstr(c.by));
    }
  }
}

InterfaceAddress If(const std::string& name, const std::string& address,
                    int prefix = 24, bool running = true) {
  return platform::FakeInterface(name, address, prefix, running, running);
}

std::vector<std::string> Names(const InterfaceChoice& c) {
  std::vector<std::string> out;
  for (const auto& a : c.chosen) out.push_back(a.name);
  return out;
}

// getifaddrs order: every IPv4 address, then the IPv6 ones.
std::vector<InterfaceAddress> TypicalHost() {
  return {If("lo", "127.0.0.1", 8),      If("docker0", "172.17.0.1", 16),
          If("eth0", "10.0.0.5"),        If("eth1", "10.1.0.5"),
          If("virbr0", "192.168.122.1"), If("lo", "::1", 128),
          If("eth0", "fd00::5", 64)};
}

TEST(NcclInterfacesTest, DefaultSkipsLoDockerVirbrAndKeepsOrder) {
  InterfaceChoice c = NcclSocketInterfaces(TypicalHost(), {});
  EXPECT_THAT(Names(c), ElementsAre("eth0", "eth1"));
  EXPECT_EQ(c.chosen[0].address, "10.0.0.5");  // first address, IPv4 first
  EXPECT_THAT(c.rule, HasSubstr("docker"));
  EXPECT_THAT(c.error, IsEmpty());
}

TEST(NcclInterfacesTest, InfinibandFirst) {
  auto ifs = TypicalHost();
  ifs.push_back(If("ib0", "192.168.50.5"));
  InterfaceChoice c = NcclSocketInterfaces(ifs, {});
  EXPECT_THAT(Names(c), ElementsAre("ib0"));
  EXPECT_THAT(c.rule, HasSubstr("ib"));
}

TEST(NcclInterfacesTest, FallsBackToDockerThenLoThenVirbr) {
  EXPECT_THAT(Names(NcclSocketInterfaces(
                  {If("lo", "127.0.0.1", 8), If("docker0", "172.17.0.1")}, {})),
              ElementsAre("docker0"));
  EXPECT_THAT(
      Names(NcclSocketInterfaces(
          {If("virbr0", "192.168.122.1"), If("lo", "127.0.0.1", 8)}, {})),
      ElementsAre("lo"));
  EXPECT_THAT(Names(NcclSocketInterfaces({If("virbr0", "192.168.122.1")}, {})),
              ElementsAre("virbr0"));
}

TEST(NcclInterfacesTest, SkipsInterfacesThatAreNotRunningAndIpv6Loopback) {
  std::vector<InterfaceAddress> ifs = {
      If("lo", "::1", 128), If("eth0", "10.0.0.5", 24, /*running=*/false),
      If("eth1", "10.1.0.5")};
  EXPECT_THAT(Names(NcclSocketInterfaces(ifs, {})), ElementsAre("eth1"));
  InterfaceChoice only_v6_lo = NcclSocketInterfaces({If("lo", "::1", 128)}, {});
  EXPECT_THAT(only_v6_lo.chosen, IsEmpty());
  EXPECT_THAT(only_v6_lo.error, Not(IsEmpty()));
}

TEST(NcclInterfacesTest, IfnamePrefixExactAndExclude) {
  std::vector<InterfaceAddress> ifs = {
      If("lo", "127.0.0.1", 8), If("eth0", "10.0.0.5"), If("eth01", "10.2.0.5"),
      If("eth1", "10.1.0.5"), If("docker0", "172.17.0.1")};
  auto pick = [&](const std::string& v) {
    return Names(NcclSocketInterfaces(ifs, {{"NCCL_SOCKET_IFNAME", v}}));
  };
  EXPECT_THAT(pick("eth"), ElementsAre("eth0", "eth01", "eth1"));
  EXPECT_THAT(pick("eth0"), ElementsAre("eth0", "eth01"));  // a prefix
  EXPECT_THAT(pick("=eth0"), ElementsAre("eth0"));          // exact
  EXPECT_THAT(pick("^eth0"), ElementsAre("lo", "eth1", "docker0"));
  EXPECT_THAT(pick("^=eth0"), ElementsAre("lo", "eth01", "eth1", "docker0"));
  EXPECT_THAT(pick("^docker,lo"), ElementsAre("eth0", "eth01", "eth1"));
  EXPECT_THAT(pick("eth1:5555,docker"), ElementsAre("eth1", "docker0"));
}

TEST(NcclInterfacesTest, IfnameMatchingNothingIsAnError) {
  InterfaceChoice c =
      NcclSocketInterfaces(TypicalHost(), {{"NCCL_SOCKET_IFNAME", "ens5"}});
  EXPECT_THAT(c.chosen, IsEmpty());
  EXPECT_THAT(c.error, HasSubstr("no socket interface found"));
  EXPECT_THAT(c.error, HasSubstr("ens5"));
}

TEST(NcclInterfacesTest, OneCharacterIfnameIsIgnored) {
  InterfaceChoice c =
      NcclSocketInterfaces(TypicalHost(), {{"NCCL_SOCKET_IFNAME", "e"}});
  EXPECT_THAT(Names(c), ElementsAre("eth0", "eth1"));
  EXPECT_THAT(c.rule, HasSubstr("ignored"));
}

TEST(NcclInterfacesTest, FamilyAndCommIdSubnet) {
  InterfaceChoice v6 =
      NcclSocketInterfaces(TypicalHost(), {{"NCCL_SOCKET_FAMILY", "AF_INET6"}});
  ASSERT_THAT(Names(v6), ElementsAre("eth0"));
  EXPECT_EQ(v6.chosen[0].address, "fd00::5");
  InterfaceChoice id =
      NcclSocketInterfaces(TypicalHost(), {{"NCCL_COMM_ID", "10.1.0.77:6000"}});
  EXPECT_THAT(Names(id), ElementsAre("eth1"));
  EXPECT_THAT(id.rule, HasSubstr("NCCL_COMM_ID"));
}

TEST(NcclInterfacesTest, MaxInterfaces) {
  EXPECT_THAT(Names(NcclSocketInterfaces(TypicalHost(), {}, 1)),
              ElementsAre("eth0"));
}

TEST(GlooDeviceTest, IfnameTakesTheFirstAddressOfThatExactName) {
  InterfaceChoice c = PytorchGlooDevice(
      TypicalHost(), {{"GLOO_SOCKET_IFNAME", "eth0"}}, "node1", {});
  ASSERT_EQ(c.chosen.size(), 1u);
  EXPECT_EQ(c.chosen[0].address, "10.0.0.5");
  InterfaceChoice two = PytorchGlooDevice(
      TypicalHost(), {{"GLOO_SOCKET_IFNAME", "eth0,eth1"}}, "node1", {});
  EXPECT_THAT(Names(two), ElementsAre("eth0", "eth1"));
  InterfaceChoice prefix = PytorchGlooDevice(
      TypicalHost(), {{"GLOO_SOCKET_IFNAME", "eth"}}, "node1", {});
  EXPECT_THAT(prefix.error, HasSubstr("Unable to find address for: eth"));
}

TEST(GlooDeviceTest, HostnameOnLoopbackIsTheTrap) {
  InterfaceChoice c = PytorchGlooDevice(TypicalHost(), {}, "node1",
                                        {{"127.0.1.1", true, true}});
  ASSERT_EQ(c.chosen.size(), 1u);
  EXPECT_EQ(c.chosen[0].address, "127.0.1.1");
  EXPECT_THAT(c.rule, HasSubstr("node1"));
}

TEST(GlooDeviceTest, FirstBindableAddressElseLoopback) {
  InterfaceChoice c = PytorchGlooDevice(
      TypicalHost(), {}, "node1",
      {{"10.9.9.9", false, false}, {"10.0.0.5", true, false}});
  ASSERT_EQ(c.chosen.size(), 1u);
  EXPECT_EQ(c.chosen[0].address, "10.0.0.5");
  EXPECT_EQ(c.chosen[0].name, "eth0");
  InterfaceChoice none = PytorchGlooDevice(TypicalHost(), {}, "node1", {});
  ASSERT_EQ(none.chosen.size(), 1u);
  EXPECT_EQ(none.chosen[0].address, "127.0.0.1");
  EXPECT_THAT(none.rule, HasSubstr("falls back"));
}

TEST(MusterCommDeviceTest, MusterIfnameThenGlooIfnameThenAdvertised) {
  EXPECT_THAT(Names(MusterCommDevice(TypicalHost(),
                                     {{"MUSTER_SOCKET_IFNAME", "eth1"},
                                      {"GLOO_SOCKET_IFNAME", "eth0"}},
                                     "10.0.0.5")),
              ElementsAre("eth1"));
  EXPECT_THAT(Names(MusterCommDevice(
                  TypicalHost(), {{"GLOO_SOCKET_IFNAME", "eth0"}}, "10.1.0.5")),
              ElementsAre("eth0"));
  EXPECT_THAT(Names(MusterCommDevice(TypicalHost(), {}, "10.1.0.5")),
              ElementsAre("eth1"));
}

TEST(PortRangesTest, ParsesAndRejects) {
  auto one = ParsePortRanges("29500");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ((*one)[0].first, 29500);
  EXPECT_EQ((*one)[0].last, 29500);
  auto range = ParsePortRanges("29400-29500");
  ASSERT_TRUE(range.ok());
  EXPECT_EQ((*range)[0].last, 29500);
  auto colon = ParsePortRanges("29400:29500, 6000");
  ASSERT_TRUE(colon.ok());
  EXPECT_EQ(colon->size(), 2u);
  EXPECT_EQ(PortRangesText(*colon), "29400-29500,6000");
  EXPECT_EQ(PortRangesText(*colon, ":"), "29400:29500,6000");
  for (const char* bad : {"0", "70000", "9-5", "abc", "", "1-x"}) {
    auto r = ParsePortRanges(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

constexpr const char* kIptables = R"(-P INPUT DROP
-P FORWARD DROP
-P OUTPUT ACCEPT
-N LOGDROP
-N CUSTOM
-A INPUT -i lo -j ACCEPT
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -m conntrack --ctstate INVALID -j DROP
-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT
-A INPUT -p udp -m udp --dport 29500 -j ACCEPT
-A INPUT -p tcp -m tcp --dport 5000 -j DROP
-A INPUT -p tcp -m multiport --dports 6000,6100:6110 -j REJECT --reject-with icmp-port-unreachable
-A INPUT -s 10.0.0.0/8 -p tcp -m tcp --dport 7000 -j ACCEPT
-A INPUT -p tcp -m tcp --dport 8000 -m comment --comment "open for the \"job\"" -j ACCEPT
-A INPUT -p tcp -j CUSTOM
-A INPUT -p tcp -m tcp --dport 29400:29500 -j ACCEPT
-A CUSTOM -p tcp -m tcp --dport 9000 -j LOGDROP
-A CUSTOM -p tcp -m tcp --dport 9100 -j RETURN
-A LOGDROP -j LOG --log-prefix "drop: "
-A LOGDROP -j DROP
)";

TEST(FirewallTest, IptablesDecisions) {
  FirewallRuleset rs = ParseIptablesRules(kIptables);
  ASSERT_EQ(rs.chains.size(), 5u);
  EXPECT_EQ(rs.rules.size(), 15u);
  ExpectDecisions(
      rs, {
              {22, PortDecision::kAllowed},
              {29450, PortDecision::kAllowed},
              {8000, PortDecision::kAllowed},  // quoted comment parsed
              {5000, PortDecision::kBlocked, "--dport 5000 -j DROP"},
              {6105, PortDecision::kBlocked},  // multiport range, REJECT
              {6000, PortDecision::kBlocked},
              // The UDP rule does not count.
              {29501, PortDecision::kBlocked, "policy DROP"},
              {7000, PortDecision::kMaybe},  // accepted from 10/8 only
              // INPUT -> CUSTOM -> LOGDROP
              {9000, PortDecision::kBlocked, "-A LOGDROP -j DROP"},
              {9100, PortDecision::kBlocked},  // RETURN, then policy
          });
}

TEST(FirewallTest, IptablesAcceptPolicyAndNegation) {
  FirewallRuleset rs = ParseIptablesRules(
      "-P INPUT ACCEPT\n"
      "-A INPUT -p tcp -m tcp ! --dport 22 -j REJECT\n");
  EXPECT_EQ(DecidePort(rs, 22).kind, PortDecision::kAllowed);
  EXPECT_EQ(DecidePort(rs, 29500).kind, PortDecision::kBlocked);
  FirewallRuleset empty = ParseIptablesRules("-P INPUT ACCEPT\n");
  EXPECT_EQ(DecidePort(empty, 29500).kind, PortDecision::kAllowed);
}

constexpr const char* kNft = R"(table inet filter {
	set allowed {
		type inet_service
		elements = { 7000, 7001 }
	}

	chain input {
		type filter hook input priority filter; policy drop;
		ct state established,related accept
		ct state invalid drop
		iif "lo" accept
		tcp dport { 22, 29400-29410 } accept
		tcp dport 5000 counter packets 3 bytes 180 reject with icmp type admin-prohibited
		udp dport 29500 accept
		tcp dport @allowed accept
		ip saddr 10.0.0.0/8 tcp dport 8000 accept
		jump extra
	}

	chain extra {
		tcp dport 9000 accept
	}

	chain forward {
		type filter hook forward priority filter; policy drop;
	}
}
table ip filter {
	# Warning: table ip filter is managed by iptables-nft, do not touch!
	chain INPUT {
		type filter hook input priority filter; policy accept;
		meta l4proto tcp tcp dport 29405 counter packets 0 bytes 0 drop
	}
}
)";

TEST(FirewallTest, NftDecisions) {
  FirewallRuleset rs = ParseNftRuleset(kNft);
  EXPECT_EQ(rs.nft_input_chain, "inet filter input");
  for (const auto& r : rs.rules) {
    EXPECT_NE(r.table, "ip filter") << "iptables-nft table read twice";
  }
  ExpectDecisions(rs,
                  {
                      {22, PortDecision::kAllowed},
                      {29405, PortDecision::kAllowed},
                      {9000, PortDecision::kAllowed},  // through the jump
                      {5000, PortDecision::kBlocked, "reject"},
                      // The UDP rule does not count.
                      {29500, PortDecision::kBlocked, "policy DROP"},
                      {7001, PortDecision::kAllowed},  // in the named set
                      {8000, PortDecision::kMaybe},  // accepted from 10/8 only
                  });
}

TEST(FirewallTest, NftUnknownSetMayAccept) {
  FirewallRuleset rs = ParseNftRuleset(R"(table ip t {
	chain c {
		type filter hook input priority 0; policy drop;
		tcp dport @elsewhere accept
	}
}
)");
  EXPECT_EQ(rs.nft_input_chain, "ip t c");
  EXPECT_EQ(DecidePort(rs, 29500).kind, PortDecision::kMaybe);
}

TEST(FirewallTest, OpenPortCommandsPerTool) {
  std::vector<PortRange> one = {{29500, 29500}};
  std::vector<PortRange> two = {{29400, 29410}, {29500, 29500}};
  EXPECT_THAT(OpenPortCommands("linux", "iptables", one),
              ElementsAre("iptables -I INPUT -p tcp --dport 29500 -j ACCEPT"));
  EXPECT_THAT(OpenPortCommands("linux", "iptables", {{29400, 29500}}),
              ElementsAre("iptables -I INPUT -p tcp --dport 29400:29500 -j "
                          "ACCEPT"));
  EXPECT_THAT(OpenPortCommands("linux", "iptables", two),
              ElementsAre("iptables -I INPUT -p tcp -m multiport --dports "
                          "29400:29410,29500 -j ACCEPT"));
  EXPECT_THAT(OpenPortCommands("linux", "nft", two, "inet filter input"),
              ElementsAre("nft insert rule inet filter input tcp dport { "
                          "29400-29410, 29500 } accept"));
  EXPECT_THAT(OpenPortCommands("linux", "ufw", two),
              ElementsAre("ufw allow 29400:29410/tcp", "ufw allow 29500/tcp"));
  EXPECT_THAT(OpenPortCommands("linux", "firewalld", two),
              ElementsAre("firewall-cmd --permanent --add-port=29400-29410/tcp "
                          "--add-port=29500/tcp && firewall-cmd --reload"));
  EXPECT_EQ(OpenPortCommands("linux", "", one).size(), 4u);
  EXPECT_THAT(
      OpenPortCommands("windows", "", {{29400, 29500}}),
      ElementsAre("netsh advfirewall firewall add rule name=\"muster TCP "
                  "29400-29500\" dir=in action=allow protocol=TCP "
                  "localport=29400-29500",
                  "New-NetFirewallRule -DisplayName \"muster TCP 29400-29500\" "
                  "-Direction Inbound -Protocol TCP -LocalPort \"29400-29500\" "
                  "-Action Allow"));
  EXPECT_THAT(OpenPortCommands("windows", "", two)[1],
              HasSubstr("-LocalPort \"29400-29410\",29500 "));
}

Report SampleReport() {
  Report r;
  r.hostname = "node1";
  r.os = "linux";
  Check a;
  a.id = "master";
  a.title = "master 10.0.0.7:29500";
  a.status = Status::kFail;
  a.summary = "filtered: no answer in 2000 ms";
  a.evidence = {"probe: 10.0.0.7 port 29500"};
  a.fix = {"Open the port."};
  a.commands = {"iptables -I INPUT -p tcp --dport 29500 -j ACCEPT"};
  a.data = {{"outcome", "filtered"}};
  Check b;
  b.id = "environment";
  b.title = "environment";
  b.status = Status::kPass;
  b.summary = "nothing set";
  Check c;
  c.id = "gpu";
  c.title = "gpu";
  c.status = Status::kWarn;
  for (int i = 0; i < 30; ++i) c.summary += "xxxx ";  // wraps, never cut
  r.checks = {a, b, c};
  return r;
}

TEST(FormatTest, TableIsAlignedWithEvidenceFixAndCounts) {
  const std::string text = FormatText(SampleReport(), 80);
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  size_t header = 0;
  while (header < lines.size() && lines[header].rfind("STATUS", 0) != 0) {
    ++header;
  }
  ASSERT_LT(header, lines.size()) << text;
  const size_t result_col = lines[header].find("RESULT");
  const size_t check_col = lines[header].find("CHECK");
  bool saw_fail = false;
  for (const std::string& l : lines) {
    for (const char* s : {"FAIL", "PASS", "WARN"}) {
      if (l.rfind(s, 0) != 0) continue;
      saw_fail = true;
      EXPECT_EQ(l.find_first_not_of(' ', 4), check_col) << l;
    }
  }
  EXPECT_TRUE(saw_fail);
  EXPECT_THAT(text, HasSubstr("filtered: no answer in 2000 ms"));
  const size_t row = text.find("master 10.0.0.7:29500");
  EXPECT_EQ(text.find("filtered", row) - text.rfind('\n', row) - 1, result_col);
  EXPECT_THAT(text, HasSubstr("        - probe: 10.0.0.7 port 29500\n"));
  EXPECT_THAT(text, HasSubstr("        fix: Open the port.\n"));
  EXPECT_THAT(
      text, HasSubstr("  $ iptables -I INPUT -p tcp --dport 29500 -j ACCEPT"));
  EXPECT_THAT(text, HasSubstr("1 failed, 1 warning, 1 passed, 0 info"));
  int words = 0;
  for (size_t at = text.find("xxxx"); at != std::string::npos;
       at = text.find("xxxx", at + 4)) {
    ++words;
  }
  EXPECT_EQ(words, 30);
  for (const std::string& l : lines) {
    if (l.find("$ ") == std::string::npos) {
      EXPECT_LE(l.size(), 80u) << l;
    }
  }
}

TEST(FormatTest, JsonCarriesEverything) {
  Report r = SampleReport();
  nlohmann::json j = nlohmann::json::parse(FormatJson(r));
  EXPECT_EQ(j["host"], "node1");
  EXPECT_EQ(j["os"], "linux");
  ASSERT_EQ(j["checks"].size(), 3u);
  EXPECT_EQ(j["checks"][0]["id"], "master");
  EXPECT_EQ(j["checks"][0]["status"], "FAIL");
  EXPECT_EQ(j["checks"][0]["data"]["outcome"], "filtered");
  EXPECT_EQ(j["checks"][0]["commands"][0],
            "iptables -I INPUT -p tcp --dport 29500 -j ACCEPT");
  EXPECT_EQ(j["counts"]["fail"], 1);
  EXPECT_EQ(j["counts"]["pass"], 1);
  EXPECT_EQ(j["counts"]["warn"], 1);
  EXPECT_EQ(j["exit_status"], 1);
  r.checks[0].status = Status::kWarn;
  EXPECT_EQ(r.ExitStatus(), 0);
  EXPECT_EQ(nlohmann::json::parse(FormatJson(r))["exit_status"], 0);
}

TEST(RunDoctorTest, BadFlagsExitTwoAndHelpExitsZero) {
  EXPECT_EQ(cli::RunDoctor({"--ports", "9-5"}, {}), 2);
  EXPECT_EQ(cli::RunDoctor({"--os", "plan9"}, {}), 2);
  EXPECT_EQ(cli::RunDoctor({"--timeout", "soon"}, {}), 2);
  EXPECT_EQ(cli::RunDoctor({"--no-such-flag"}, {}), 2);
  EXPECT_EQ(cli::RunDoctor({"--help"}, {}), 0);
}

// ---- The probe's words, and probes of loopback (no privileges needed) ----

TEST(ProbeWordsTest, OutcomeNames) {
  EXPECT_EQ(ProbeOutcomeName(ProbeOutcome::kOpen), "open");
  EXPECT_EQ(ProbeOutcomeName(ProbeOutcome::kRefused), "refused");
  EXPECT_EQ(ProbeOutcomeName(ProbeOutcome::kFiltered), "filtered");
  EXPECT_EQ(ProbeOutcomeName(ProbeOutcome::kRejected), "rejected");
  EXPECT_EQ(ProbeOutcomeName(ProbeOutcome::kUnreachable), "unreachable");
  EXPECT_EQ(ProbeOutcomeName(ProbeOutcome::kDnsFailure), "dns-failure");
  EXPECT_EQ(ProbeOutcomeName(ProbeOutcome::kError), "error");
}

TEST(ProbeWordsTest, ExplainAndFixNameCauseAndRemedy) {
  ProbeResult r;
  r.host = "node2";
  r.port = 29500;
  r.resolved_address = "10.0.0.7";
  r.elapsed = absl::Seconds(2);
  r.outcome = ProbeOutcome::kFiltered;
  EXPECT_THAT(r.Explain(), HasSubstr("firewall"));
  EXPECT_THAT(r.Explain(), HasSubstr("node2:29500 (10.0.0.7)"));
  EXPECT_THAT(r.Fix(), HasSubstr("security group"));
  r.outcome = ProbeOutcome::kRejected;
  r.icmp_type = 3;
  r.icmp_code = 13;
  r.icmp_source = "10.0.0.7";
  EXPECT_THAT(r.Explain(), HasSubstr("admin-prohibited"));
  EXPECT_THAT(r.Explain(), HasSubstr("REJECT rule"));
  EXPECT_THAT(r.Fix(), HasSubstr("iptables -I INPUT -p tcp --dport 29500"));
  r.icmp_source = "10.0.0.5";
  r.icmp_from_this_host = true;
  EXPECT_THAT(r.Fix(), HasSubstr("OUTPUT"));
  r = ProbeResult();
  r.host = "node2";
  r.port = 29500;
  r.outcome = ProbeOutcome::kRefused;
  EXPECT_THAT(r.Explain(), HasSubstr("Nothing listens"));
  EXPECT_THAT(r.Fix(), HasSubstr("ss -ltnp"));
  r.outcome = ProbeOutcome::kDnsFailure;
  r.detail = "EAI_NONAME: no such name";
  EXPECT_THAT(r.Explain(), HasSubstr("does not resolve"));
  EXPECT_THAT(r.Fix(), HasSubstr("/etc/hosts"));
}

TEST(ProbeLoopbackTest, RefusedOpenDnsAndBadPort) {
  auto port = PickFreePort("127.0.0.1");
  ASSERT_TRUE(port.ok());
  ProbeResult refused = ProbeTcp("127.0.0.1", *port, absl::Seconds(2));
  EXPECT_EQ(refused.outcome, ProbeOutcome::kRefused) << refused.detail;
  EXPECT_EQ(refused.resolved_address, "127.0.0.1");
  EXPECT_LT(refused.elapsed, absl::Seconds(1));

  testing::TcpListener listener("127.0.0.1");
  ASSERT_TRUE(listener.ok());
  ProbeResult open = ProbeTcp("localhost", listener.port(), absl::Seconds(2));
  EXPECT_EQ(open.outcome, ProbeOutcome::kOpen) << open.detail;

  ProbeResult dns =
      ProbeTcp("no-such-host.invalid", 29500, absl::Milliseconds(1500));
  EXPECT_EQ(dns.outcome, ProbeOutcome::kDnsFailure) << dns.detail;
  EXPECT_LT(dns.elapsed, absl::Seconds(5));

  EXPECT_EQ(ProbeTcp("127.0.0.1", 0, absl::Seconds(1)).outcome,
            ProbeOutcome::kError);
  EXPECT_EQ(ProbeTcp("127.0.0.1", 70000, absl::Seconds(1)).outcome,
            ProbeOutcome::kError);
}

}  // namespace
}  // namespace muster::doctor
