// `muster doctor` as a user runs it: real processes, real sockets, real
// iptables rules, in network namespaces made by the test (tests/doctor/
// netns.h), and a private mount namespace whose /etc/hosts maps this host's
// name to 127.0.1.1. Tests that need root, namespaces or iptables skip with a
// message where they cannot run; the others run anywhere.
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/common/net.h"
#include "nlohmann/json.hpp"
#include "tests/doctor/netns.h"
#include "tests/doctor/netns_fixture.h"
#include "tests/testing/subprocess.h"

namespace muster {
namespace {

using ::muster::testing::BinPath;
using ::muster::testing::FreePort;
using ::muster::testing::MakeTempDir;
using ::muster::testing::NetnsPair;
using ::muster::testing::RunCommand;
using ::muster::testing::Subprocess;
using ::muster::testing::ToolPath;
using ::testing::HasSubstr;

// `muster doctor ARGS`, with build/bin/muster.
std::vector<std::string> Doctor(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {BinPath("muster"), "doctor"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

struct DoctorRun {
  int rc = -1;
  std::string output;
  nlohmann::json json;
};

// Runs argv to completion (60 s at most); parses the JSON report when there
// is one (it starts at a line "{").
DoctorRun RunToEnd(const std::vector<std::string>& argv,
                   std::map<std::string, std::string> env = {}) {
  Subprocess p(argv, std::move(env));
  DoctorRun r;
  r.rc = p.WaitOrKill(absl::Seconds(60));
  r.output = p.Output();
  size_t start = std::string::npos;
  if (r.output.rfind("{\n", 0) == 0) {
    start = 0;
  } else if (size_t at = r.output.find("\n{\n"); at != std::string::npos) {
    start = at + 1;
  }
  if (start != std::string::npos) {
    r.json = nlohmann::json::parse(r.output.substr(start), nullptr,
                                   /*allow_exceptions=*/false);
  }
  return r;
}

// The first check with this id (and title containing `title`).
nlohmann::json CheckOf(const DoctorRun& r, const std::string& id,
                       const std::string& title = "") {
  if (!r.json.is_object()) return nullptr;
  for (const auto& c : r.json["checks"]) {
    if (c["id"] == id &&
        absl::StrContains(c["title"].get<std::string>(), title)) {
      return c;
    }
  }
  return nullptr;
}

std::string Joined(const nlohmann::json& lines) {
  std::string out;
  if (!lines.is_array()) return out;
  for (const auto& l : lines) absl::StrAppend(&out, l.get<std::string>(), "\n");
  return out;
}

// `text` with every run of whitespace made one space.
std::string Squeezed(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool space = c == ' ' || c == '\n' || c == '\t';
    if (space && (out.empty() || out.back() == ' ')) continue;
    out += space ? ' ' : c;
  }
  return out;
}

// ---- No privileges needed ----

TEST(DoctorTest, PortHeldByAProcessNamesItsPid) {
  const int port = FreePort();
  Subprocess holder({BinPath("doctor_port_holder"), "--addr", "127.0.0.1",
                     "--port", absl::StrCat(port)});
  ASSERT_TRUE(holder.WaitForOutput("listening", absl::Seconds(10)))
      << holder.Output();

  DoctorRun j = RunToEnd(Doctor({"--ports", absl::StrCat(port), "--json"}));
  ASSERT_TRUE(j.json.is_object()) << j.output;
  nlohmann::json ports = CheckOf(j, "ports");
  ASSERT_TRUE(ports.is_object()) << j.output;
  EXPECT_EQ(ports["status"], "FAIL");
  EXPECT_THAT(ports["summary"].get<std::string>(),
              HasSubstr(absl::StrCat("pid ", holder.pid())));
  bool found = false;
  for (const auto& p : ports["data"]["ports"]) {
    for (const auto& h : p["holders"]) {
      if (h["pid"] == holder.pid()) {
        found = true;
        EXPECT_THAT(h["command"].get<std::string>(),
                    HasSubstr("doctor_port_holder"));
        EXPECT_EQ(h["state"], "LISTEN");
      }
    }
  }
  EXPECT_TRUE(found) << ports.dump(2);
  EXPECT_EQ(j.rc, 1);

  DoctorRun text = RunToEnd(Doctor({"--ports", absl::StrCat(port)}));
  EXPECT_THAT(text.output, HasSubstr(absl::StrCat("pid ", holder.pid())));
  EXPECT_THAT(text.output, HasSubstr("Address already in use"));
  EXPECT_THAT(text.output, HasSubstr(absl::StrCat("$ kill ", holder.pid())));
  EXPECT_EQ(text.rc, 1);
}

TEST(DoctorTest, BadCommandLineExitsTwo) {
  EXPECT_EQ(RunToEnd(Doctor({"--ports", "9-5"})).rc, 2);
  EXPECT_EQ(RunToEnd(Doctor({"--os", "plan9"})).rc, 2);
}

TEST(DoctorTest, DnsFailureAndStaleRankVariables) {
  DoctorRun r =
      RunToEnd(Doctor({"--peer", "no-such-host.invalid:29500", "--timeout", "1",
                       "--json"}),
               {{"RANK", "5"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(r.json.is_object()) << r.output;
  nlohmann::json peer = CheckOf(r, "peer");
  ASSERT_TRUE(peer.is_object()) << r.output;
  EXPECT_EQ(peer["status"], "FAIL");
  EXPECT_EQ(peer["data"]["outcome"], "dns-failure");
  nlohmann::json env = CheckOf(r, "environment");
  EXPECT_EQ(env["status"], "FAIL");
  EXPECT_THAT(env["summary"].get<std::string>(),
              HasSubstr("RANK=5 is not below WORLD_SIZE=4"));
  EXPECT_THAT(Joined(env["commands"]), HasSubstr("unset RANK WORLD_SIZE"));
  EXPECT_EQ(r.rc, 1);
}

// ---- In network namespaces (root) ----

class DoctorNetnsTest : public ::muster::testing::NetnsFixture {
 protected:
  void ListenInB(int port) {
    listeners_.push_back(std::make_unique<Subprocess>(
        pair_->In(pair_->b(), {BinPath("doctor_port_holder"), "--addr",
                               "0.0.0.0", "--port", absl::StrCat(port)})));
    ASSERT_TRUE(
        listeners_.back()->WaitForOutput("listening", absl::Seconds(10)))
        << listeners_.back()->Output();
  }

  // Blocks 5100 (DROP) and 5101 (REJECT) in b, serves 5103, leaves 5102
  // closed.
  void SetUpTargets() {
    ListenInB(5103);
    InB({"iptables", "-A", "INPUT", "-p", "tcp", "--dport", "5100", "-j",
         "DROP"});
    InB({"iptables", "-A", "INPUT", "-p", "tcp", "--dport", "5101", "-j",
         "REJECT"});
  }

  std::vector<std::unique_ptr<Subprocess>> listeners_;
};

TEST_F(DoctorNetnsTest, ConnectOutcomesToldApart) {
  SetUpTargets();
  const std::vector<std::string> args = {
      "--rdzv-endpoint", "10.77.0.2:5103", "--master-addr", "10.77.0.2",
      "--master-port",   "5100",           "--peer",        "10.77.0.2:5101",
      "--peer",          "10.77.0.2:5102", "--timeout",     "1"};
  std::vector<std::string> json_args = args;
  json_args.push_back("--json");
  DoctorRun r = RunToEnd(pair_->In(pair_->a(), Doctor(json_args)));
  ASSERT_TRUE(r.json.is_object()) << r.output;

  nlohmann::json endpoint = CheckOf(r, "endpoint");
  EXPECT_EQ(endpoint["status"], "PASS") << endpoint.dump(2);
  EXPECT_EQ(endpoint["data"]["outcome"], "open");

  nlohmann::json master = CheckOf(r, "master");
  EXPECT_EQ(master["status"], "FAIL") << master.dump(2);
  EXPECT_EQ(master["data"]["outcome"], "filtered");
  EXPECT_THAT(master["summary"].get<std::string>(), HasSubstr("firewall"));
  EXPECT_THAT(Joined(master["commands"]),
              HasSubstr("iptables -I INPUT -p tcp --dport 5100 -j ACCEPT"));

  nlohmann::json rejected = CheckOf(r, "peer", ":5101");
  EXPECT_EQ(rejected["status"], "FAIL") << rejected.dump(2);
  EXPECT_EQ(rejected["data"]["outcome"], "rejected");
  EXPECT_EQ(rejected["data"]["icmp"]["type"], 3);
  EXPECT_EQ(rejected["data"]["icmp"]["code"], 3);  // iptables' default
  EXPECT_EQ(rejected["data"]["icmp"]["from"], "10.77.0.2");

  nlohmann::json refused = CheckOf(r, "peer", ":5102");
  EXPECT_EQ(refused["status"], "WARN") << refused.dump(2);  // no job yet
  EXPECT_EQ(refused["data"]["outcome"], "refused");
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.json["exit_status"], 1);

  // The table says the same in words.
  DoctorRun text = RunToEnd(pair_->In(pair_->a(), Doctor(args)));
  auto row = [&](const std::string& title) {
    for (const std::string& l : testing::LinesWith(text.output, title)) {
      if (l.rfind("PASS", 0) == 0 || l.rfind("WARN", 0) == 0 ||
          l.rfind("FAIL", 0) == 0) {
        return l;
      }
    }
    return std::string();
  };
  EXPECT_THAT(row("master 10.77.0.2:5100"), HasSubstr("filtered"));
  EXPECT_THAT(row("master 10.77.0.2:5100"), HasSubstr("firewall"));
  EXPECT_THAT(row("peer 10.77.0.2:5101"), HasSubstr("rejected"));
  EXPECT_THAT(row("peer 10.77.0.2:5102"), HasSubstr("refused"));
  EXPECT_THAT(row("rdzv endpoint 10.77.0.2:5103"), HasSubstr("open"));
  EXPECT_EQ(text.rc, 1);
}

TEST_F(DoctorNetnsTest, NothingListeningAtTheEndpointFails) {
  DoctorRun r = RunToEnd(pair_->In(
      pair_->a(), Doctor({"--rdzv-endpoint", "10.77.0.2:5102", "--json"})));
  nlohmann::json endpoint = CheckOf(r, "endpoint");
  ASSERT_TRUE(endpoint.is_object()) << r.output;
  EXPECT_EQ(endpoint["status"], "FAIL");
  EXPECT_EQ(endpoint["data"]["outcome"], "refused");
  EXPECT_THAT(endpoint["summary"].get<std::string>(),
              HasSubstr("nothing listens"));
  EXPECT_THAT(Joined(endpoint["commands"]),
              HasSubstr("musterd --listen=0.0.0.0:5102"));
  EXPECT_EQ(r.rc, 1);
}

TEST_F(DoctorNetnsTest, LocalFirewallRulesAndTheCommandThatOpensThem) {
  SetUpTargets();
  DoctorRun r = RunToEnd(
      pair_->In(pair_->b(), Doctor({"--ports", "5100-5101", "--json"})));
  nlohmann::json fw = CheckOf(r, "firewall");
  ASSERT_TRUE(fw.is_object()) << r.output;
  EXPECT_EQ(fw["status"], "FAIL");
  const std::string evidence = Joined(fw["evidence"]);
  EXPECT_THAT(evidence, HasSubstr("--dport 5100 -j DROP"));
  EXPECT_THAT(evidence, HasSubstr("--dport 5101 -j REJECT"));
  EXPECT_THAT(
      Joined(fw["commands"]),
      HasSubstr("iptables -I INPUT -p tcp --dport 5100:5101 -j ACCEPT"));
  EXPECT_EQ(r.rc, 1);

  DoctorRun win = RunToEnd(
      pair_->In(pair_->b(),
                Doctor({"--ports", "5100-5101", "--os", "windows", "--json"})));
  nlohmann::json wfw = CheckOf(win, "firewall");
  ASSERT_TRUE(wfw.is_object()) << win.output;
  const std::string cmds = Joined(wfw["commands"]);
  EXPECT_THAT(cmds,
              HasSubstr("netsh advfirewall firewall add rule name=\"muster "
                        "TCP 5100-5101\" dir=in action=allow "
                        "protocol=TCP localport=5100-5101"));
  EXPECT_THAT(cmds, HasSubstr("New-NetFirewallRule -DisplayName \"muster TCP "
                              "5100-5101\" -Direction Inbound -Protocol TCP "
                              "-LocalPort \"5100-5101\" -Action Allow"));
}

TEST_F(DoctorNetnsTest, PortHeldInTheNamespaceNamesItsPid) {
  ListenInB(5103);
  DoctorRun r = RunToEnd(pair_->In(pair_->b(), Doctor({"--ports", "5103"})));
  // The holder's pid as this (outer) pid namespace sees it: namespaces here
  // are network namespaces only.
  EXPECT_THAT(r.output,
              HasSubstr(absl::StrCat("pid ", listeners_.back()->pid())));
  EXPECT_EQ(r.rc, 1);
}

// The 127.0.1.1 trap: run the doctor in a private mount namespace whose
// /etc/hosts maps this host's name to 127.0.1.1 (Debian's installer writes
// exactly that line).
class DoctorHostsTest : public DoctorNetnsTest {
 protected:
  void SetUp() override {
    DoctorNetnsTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (ToolPath("unshare").empty() || ToolPath("mount").empty()) {
      GTEST_SKIP() << "SKIPPED: needs unshare and mount";
    }
    std::string out;
    if (RunCommand({"unshare", "-m", "--", ToolPath("true")}, &out) != 0) {
      GTEST_SKIP() << "SKIPPED: cannot make a mount namespace: " << out;
    }
  }

  // Runs the doctor in namespace a() with /etc/hosts replaced by `hosts`.
  DoctorRun WithHosts(const std::string& hosts, std::vector<std::string> args) {
    const std::string file = MakeTempDir("hosts") + "/hosts";
    std::ofstream(file) << hosts;
    std::vector<std::string> doctor = Doctor(args);
    std::vector<std::string> argv = {ToolPath("unshare"),
                                     "-m",
                                     "--",
                                     ToolPath("sh"),
                                     "-c",
                                     "mount --bind \"$0\" /etc/hosts && exec "
                                     "\"$@\"",
                                     file};
    argv.insert(argv.end(), doctor.begin(), doctor.end());
    return RunToEnd(pair_->In(pair_->a(), argv));
  }
};

TEST_F(DoctorHostsTest, HostnameOnLoopbackIsTheTrapNamed) {
  const std::string host = LocalHostname();
  const std::string hosts =
      absl::StrCat("127.0.0.1\tlocalhost\n127.0.1.1\t", host, "\n");
  DoctorRun r = WithHosts(hosts, {"--json"});
  nlohmann::json h = CheckOf(r, "hostname");
  ASSERT_TRUE(h.is_object()) << r.output;
  EXPECT_EQ(h["status"], "WARN") << h.dump(2);  // one node: a warning
  EXPECT_EQ(h["data"]["loopback_trap"], true);
  EXPECT_THAT(h["summary"].get<std::string>(), HasSubstr("127.0.1.1 trap"));
  const std::string evidence = Joined(h["evidence"]);
  EXPECT_THAT(evidence,
              HasSubstr(absl::StrCat("/etc/hosts:2: 127.0.1.1\t", host)));
  EXPECT_THAT(evidence, HasSubstr("binds 127.0.1.1"));
  EXPECT_EQ(h["data"]["gloo"]["chosen"][0]["address"], "127.0.1.1");
  // NCCL picks by interface: the veth in namespace a.
  EXPECT_EQ(h["data"]["nccl"]["chosen"][0]["address"], NetnsPair::kAddrA);
  EXPECT_THAT(Joined(h["fix"]),
              HasSubstr(absl::StrCat(NetnsPair::kAddrA, " ", host)));

  // With another node in play it is a failure.
  DoctorRun multi = WithHosts(hosts, {"--peer", "10.77.0.2:5102", "--json"});
  nlohmann::json hm = CheckOf(multi, "hostname");
  ASSERT_TRUE(hm.is_object()) << multi.output;
  EXPECT_EQ(hm["status"], "FAIL");
  EXPECT_EQ(multi.rc, 1);

  // The table names it too (the table wraps lines: compare words).
  DoctorRun text = WithHosts(hosts, {});
  EXPECT_THAT(Squeezed(text.output), HasSubstr("(the 127.0.1.1 trap)"));
}

TEST_F(DoctorHostsTest, HostnameOnARealAddressPasses) {
  const std::string host = LocalHostname();
  DoctorRun r = WithHosts(absl::StrCat("127.0.0.1\tlocalhost\n",
                                       NetnsPair::kAddrA, "\t", host, "\n"),
                          {"--json"});
  nlohmann::json h = CheckOf(r, "hostname");
  ASSERT_TRUE(h.is_object()) << r.output;
  EXPECT_EQ(h["status"], "PASS") << h.dump(2);
  EXPECT_EQ(h["data"]["loopback_trap"], false);
  nlohmann::json ifs = CheckOf(r, "interfaces");
  EXPECT_EQ(ifs["status"], "PASS") << ifs.dump(2);
  // Nothing else here fails but, on a machine with a broken GPU driver, that.
  for (const auto& c : r.json["checks"]) {
    if (c["id"] != "gpu") {
      EXPECT_NE(c["status"], "FAIL") << c.dump(2);
    }
  }
}

}  // namespace
}  // namespace muster
