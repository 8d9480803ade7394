// Every check of `muster doctor` on hand-made facts: each is a pure function,
// so these tests build the facts a host would show and assert the status,
// the cause and the fix command (Linux, and Windows where the check writes
// one). Plus the plan (targets, local ports) and the order of the report.
#include "muster/doctor/checks.h"

#include <cerrno>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/doctor/facts.h"
#include "platform/fake/fake_net.h"

namespace muster::doctor {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

InterfaceAddress If(const std::string& name, const std::string& address,
                    int prefix = 24) {
  return platform::FakeInterface(name, address, prefix);
}

// lo, eth0 10.0.0.5/24, eth1 10.1.0.5/24.
std::vector<InterfaceAddress> Host() {
  return {If("lo", "127.0.0.1", 8), If("eth0", "10.0.0.5"),
          If("eth1", "10.1.0.5"), If("lo", "::1", 128)};
}

ProbeResult Probe(const std::string& host, int port, ProbeOutcome outcome,
                  const std::string& address) {
  ProbeResult r;
  r.host = host;
  r.port = port;
  r.outcome = outcome;
  r.resolved_address = address;
  r.elapsed = absl::Milliseconds(outcome == ProbeOutcome::kFiltered ? 2000 : 1);
  r.detail = "seen";
  return r;
}

Target MakeTarget(const std::string& id, const std::string& host, int port) {
  return {id, id + " " + host, HostPort{host, port}};
}

platform::TcpSocket Listener(int port, int pid, const std::string& command) {
  platform::TcpSocket s;
  s.state = "LISTEN";
  s.local = "0.0.0.0:" + std::to_string(port);
  s.remote = "0.0.0.0:0";
  s.local_port = port;
  s.pid = pid;
  s.command = command;
  return s;
}

// ---- TargetCheck ----

TEST(TargetCheckTest, OpenLocalNamesTheListener) {
  Check c =
      TargetCheck(MakeTarget("endpoint", "127.0.0.1", 29400), true,
                  Probe("127.0.0.1", 29400, ProbeOutcome::kOpen, "127.0.0.1"),
                  "linux", {Listener(29400, 42, "musterd --listen")});
  EXPECT_EQ(c.status, Status::kPass);
  EXPECT_THAT(c.summary, StartsWith("open"));
  EXPECT_THAT(c.evidence, Contains(HasSubstr("listening here: pid 42 "
                                             "(musterd --listen)")));
  EXPECT_EQ(c.data["outcome"], "open");
}

TEST(TargetCheckTest, RefusedRemoteEndpointFailsLocalOneWarns) {
  const ProbeResult refused =
      Probe("node0", 29400, ProbeOutcome::kRefused, "10.0.0.9");
  Check remote = TargetCheck(MakeTarget("endpoint", "node0", 29400), false,
                             refused, "linux", {});
  EXPECT_EQ(remote.status, Status::kFail);
  EXPECT_THAT(remote.commands,
              ElementsAre("musterd --listen=0.0.0.0:29400   # on node0"));
  Check local = TargetCheck(MakeTarget("endpoint", "node0", 29400), true,
                            refused, "linux", {});
  EXPECT_EQ(local.status, Status::kWarn);
  EXPECT_THAT(local.evidence, Contains(HasSubstr("is_host")));
  Check master = TargetCheck(MakeTarget("master", "node0", 29500), false,
                             refused, "linux", {});
  EXPECT_EQ(master.status, Status::kWarn);
  EXPECT_THAT(master.commands, IsEmpty());
}

TEST(TargetCheckTest, FilteredFailsWithTheFirewallCommandForTheOs) {
  const ProbeResult filtered =
      Probe("node1", 29500, ProbeOutcome::kFiltered, "10.0.0.7");
  Check c = TargetCheck(MakeTarget("master", "node1", 29500), false, filtered,
                        "linux", {});
  EXPECT_EQ(c.status, Status::kFail);
  EXPECT_THAT(c.summary, StartsWith("filtered: no answer in 2000 ms"));
  EXPECT_THAT(c.fix, Contains("On node1, as root, with the firewall it runs:"));
  EXPECT_THAT(c.commands,
              Contains("iptables -I INPUT -p tcp --dport 29500 -j ACCEPT   # "
                       "iptables"));
  Check w = TargetCheck(MakeTarget("master", "node1", 29500), false, filtered,
                        "windows", {});
  EXPECT_THAT(w.fix, Contains("On node1, in an elevated prompt:"));
  EXPECT_THAT(w.commands, Contains(StartsWith("New-NetFirewallRule")));
  EXPECT_THAT(w.commands, Contains(StartsWith("netsh advfirewall")));
}

TEST(TargetCheckTest, DnsFailureFails) {
  Check c = TargetCheck(MakeTarget("peer", "nowhere", 29500), false,
                        Probe("nowhere", 29500, ProbeOutcome::kDnsFailure, ""),
                        "linux", {});
  EXPECT_EQ(c.status, Status::kFail);
  EXPECT_THAT(c.summary, HasSubstr("does not resolve"));
  EXPECT_THAT(c.fix, Contains(HasSubstr("/etc/hosts")));
}

// ---- PortsCheck ----

TEST(PortsCheckTest, TakenRequiredPortFailsAndNamesTheProcess) {
  Check c = PortsCheck({{{29500, 29500}, "master port", true, false}},
                       {{29500, EADDRINUSE}},
                       {Listener(29500, 77, "python train.py")}, "linux");
  EXPECT_EQ(c.status, Status::kFail);
  EXPECT_THAT(c.summary, HasSubstr("port 29500 is in use by pid 77"));
  EXPECT_THAT(c.commands, ElementsAre("kill 77   # python train.py"));
  Check w = PortsCheck({{{29500, 29500}, "master port", true, false}},
                       {{29500, EADDRINUSE}},
                       {Listener(29500, 77, "python train.py")}, "windows");
  EXPECT_THAT(w.commands,
              ElementsAre("Stop-Process -Id 77   # python train.py"));
}

TEST(PortsCheckTest, MusterWhereMusterBelongsPassesOthersWarn) {
  Check served = PortsCheck(
      {{{29400, 29400}, "rendezvous endpoint", true, true}},
      {{29400, EADDRINUSE}},
      {Listener(29400, 5, "/usr/bin/musterd --listen=0.0.0.0")}, "linux");
  EXPECT_EQ(served.status, Status::kPass);
  EXPECT_THAT(served.summary, HasSubstr("served by muster"));
  Check optional =
      PortsCheck({{{29500, 29500}, "MASTER_PORT's default", false, false}},
                 {{29500, EADDRINUSE}}, {Listener(29500, 0, "")}, "linux");
  EXPECT_EQ(optional.status, Status::kWarn);
  EXPECT_THAT(optional.evidence, Contains(HasSubstr("owner not visible")));
}

TEST(PortsCheckTest, FreePortsPass) {
  Check c =
      PortsCheck({{{29400, 29402}, "--ports", true, false}}, {}, {}, "linux");
  EXPECT_EQ(c.status, Status::kPass);
  EXPECT_EQ(c.summary, "all 3 free");
  EXPECT_EQ(c.data["checked"], 3);
}

// ---- HostnameCheck ----

HostnameFacts Trap() {
  HostnameFacts h;
  h.hostname = "node1";
  h.resolved = true;
  h.addresses = {{"127.0.1.1", true, true}};
  h.hosts_file = "127.0.0.1 localhost\n127.0.1.1 node1\n";
  return h;
}

TEST(HostnameCheckTest, LoopbackTrapFailsAcrossNodesWithTheHostsLine) {
  Check c = HostnameCheck(Trap(), Host(), {}, /*multi_node=*/true, "linux");
  EXPECT_EQ(c.status, Status::kFail);
  EXPECT_THAT(c.summary, HasSubstr("127.0.1.1, a loopback address"));
  EXPECT_THAT(c.evidence, Contains("/etc/hosts:2: 127.0.1.1 node1"));
  EXPECT_THAT(c.fix, Contains(HasSubstr("change line 2 '127.0.1.1 node1' to "
                                        "'10.0.0.5 node1'")));
  EXPECT_THAT(c.commands, ElementsAre("export GLOO_SOCKET_IFNAME=eth0 "
                                      "NCCL_SOCKET_IFNAME=eth0"));
  EXPECT_EQ(c.data["loopback_trap"], true);
  Check w = HostnameCheck(Trap(), Host(), {}, true, "windows");
  EXPECT_THAT(w.commands, ElementsAre("$env:GLOO_SOCKET_IFNAME=\"eth0\"; "
                                      "$env:NCCL_SOCKET_IFNAME=\"eth0\""));
}

TEST(HostnameCheckTest, TrapWarnsOnOneNodeAndPassesWithGlooIfname) {
  EXPECT_EQ(HostnameCheck(Trap(), Host(), {}, false, "linux").status,
            Status::kWarn);
  Check pinned = HostnameCheck(Trap(), Host(), {{"GLOO_SOCKET_IFNAME", "eth0"}},
                               true, "linux");
  EXPECT_EQ(pinned.status, Status::kPass);
  EXPECT_THAT(pinned.summary, HasSubstr("GLOO_SOCKET_IFNAME makes Gloo bind "
                                        "10.0.0.5"));
}

TEST(HostnameCheckTest, RealAddressPassesUnresolvedFails) {
  HostnameFacts good;
  good.hostname = "node1";
  good.resolved = true;
  good.addresses = {{"10.0.0.5", true, false}};
  Check c = HostnameCheck(good, Host(), {}, true, "linux");
  EXPECT_EQ(c.status, Status::kPass);
  EXPECT_THAT(c.summary, HasSubstr("'node1' resolves to 10.0.0.5"));
  HostnameFacts none;
  none.hostname = "node1";
  none.resolve_error = "Name or service not known";
  Check n = HostnameCheck(none, Host(), {}, true, "linux");
  EXPECT_EQ(n.status, Status::kFail);
  EXPECT_THAT(n.summary, HasSubstr("does not resolve"));
  EXPECT_THAT(n.evidence,
              Contains("getaddrinfo(node1): Name or service not known"));
}

// ---- InterfacesCheck ----

HostnameFacts Resolved() {
  HostnameFacts h;
  h.hostname = "node1";
  h.resolved = true;
  h.addresses = {{"10.0.0.5", true, false}};
  return h;
}

TEST(InterfacesCheckTest, DefaultChoicePasses) {
  Check c = InterfacesCheck(Host(), Resolved(), {}, "10.0.0.5", {}, {}, true,
                            "linux");
  EXPECT_EQ(c.status, Status::kPass);
  EXPECT_EQ(c.summary, "NCCL eth0 10.0.0.5; Gloo eth0 10.0.0.5");
  EXPECT_THAT(c.evidence, Contains("eth0 UP: 10.0.0.5/24"));
}

TEST(InterfacesCheckTest, IfnameMatchingNothingFails) {
  Check c = InterfacesCheck(Host(), Resolved(), {{"NCCL_SOCKET_IFNAME", "ib9"}},
                            "10.0.0.5", {}, {}, true, "linux");
  EXPECT_EQ(c.status, Status::kFail);
  EXPECT_THAT(c.summary, HasSubstr("no socket interface found"));
  EXPECT_THAT(c.commands, ElementsAre("export NCCL_SOCKET_IFNAME=eth0 "
                                      "GLOO_SOCKET_IFNAME=eth0"));
}

TEST(InterfacesCheckTest, ChoiceOtherThanTheRouteToAPeerWarns) {
  Check c = InterfacesCheck(Host(), Resolved(), {}, "10.0.0.5", {"10.1.0.9"},
                            {{"10.1.0.9", "10.1.0.5"}}, true, "linux");
  EXPECT_EQ(c.status, Status::kWarn);
  EXPECT_THAT(c.summary, HasSubstr("NCCL binds eth0 10.0.0.5 but this host "
                                   "reaches 10.1.0.9 from eth1 10.1.0.5"));
  EXPECT_THAT(c.evidence, Contains("route to 10.1.0.9: from eth1 10.1.0.5"));
  EXPECT_THAT(c.commands, ElementsAre("export NCCL_SOCKET_IFNAME=eth1 "
                                      "GLOO_SOCKET_IFNAME=eth1"));
  Check none = InterfacesCheck(Host(), Resolved(), {}, "10.0.0.5", {"10.9.9.9"},
                               {{"10.9.9.9", ""}}, true, "linux");
  EXPECT_EQ(none.status, Status::kWarn);
  EXPECT_EQ(none.summary, "no route from this host to 10.9.9.9");
}

// ---- FirewallCheck ----

platform::ToolResult Tool(const std::string& output, int exit_code = 0) {
  platform::ToolResult r;
  r.found = true;
  r.exit_code = exit_code;
  r.output = output;
  return r;
}

TEST(FirewallCheckTest, IptablesDropPolicyBlocksAndNamesTheCommand) {
  FirewallFacts f;
  f.iptables = Tool(
      "-P INPUT DROP\n-P FORWARD ACCEPT\n-P OUTPUT ACCEPT\n"
      "-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n");
  Check c = FirewallCheck({{29500, 29500}}, f, "linux", true);
  EXPECT_EQ(c.status, Status::kFail);
  EXPECT_EQ(c.summary, "this host's firewall blocks inbound TCP 29500");
  EXPECT_THAT(c.commands,
              Contains("iptables -I INPUT -p tcp --dport 29500 -j ACCEPT"));
  EXPECT_THAT(c.evidence, Contains(HasSubstr("ephemeral ports")));
  Check w = FirewallCheck({{29500, 29500}}, f, "windows", true);
  EXPECT_THAT(w.commands,
              Contains(StartsWith("netsh advfirewall firewall add "
                                  "rule name=\"muster TCP 29500\"")));
  EXPECT_THAT(w.commands, Contains(HasSubstr("-RemoteAddress 10.0.0.0/24")));
}

TEST(FirewallCheckTest, NoToolPassesWithEveryCommand) {
  Check c = FirewallCheck({{29400, 29400}}, FirewallFacts{}, "linux", true);
  EXPECT_EQ(c.status, Status::kPass);
  EXPECT_EQ(c.summary,
            "no firewall tool found here; nothing local filters the ports");
  EXPECT_EQ(c.commands.size(), 4u);  // iptables, nft, ufw, firewalld
  EXPECT_EQ(c.data["tools"]["iptables"], "absent");
}

TEST(FirewallCheckTest, UnreadableRulesWarnAndAskForRoot) {
  FirewallFacts f;
  f.iptables = Tool("iptables: Permission denied (you must be root)\n", 4);
  Check c = FirewallCheck({{29400, 29400}}, f, "linux", false);
  EXPECT_EQ(c.status, Status::kWarn);
  EXPECT_EQ(c.summary, "could not read the rules of iptables (run as root)");
  f.root = true;
  EXPECT_EQ(FirewallCheck({{29400, 29400}}, f, "linux", false).summary,
            "could not read the rules of iptables");
}

TEST(FirewallCheckTest, FirewalldZoneWithoutThePortMayBlock) {
  FirewallFacts f;
  f.firewalld = Tool("running\n");
  f.firewalld_ports = Tool("22/tcp 29400/tcp\n");
  f.firewalld_services = Tool("ssh dhcpv6-client\n");
  Check open = FirewallCheck({{29400, 29400}}, f, "linux", true);
  EXPECT_EQ(open.status, Status::kPass);
  Check c = FirewallCheck({{29500, 29500}}, f, "linux", true);
  EXPECT_EQ(c.status, Status::kWarn);
  EXPECT_THAT(c.summary, HasSubstr("firewalld's default zone does not list"));
  EXPECT_THAT(c.commands,
              ElementsAre("firewall-cmd --permanent --add-port=29500/tcp && "
                          "firewall-cmd --reload"));
}

TEST(FirewallCheckTest, BlockedEphemeralPortsFailOnlyAcrossNodes) {
  FirewallFacts f;
  f.iptables =
      Tool("-P INPUT DROP\n-A INPUT -p tcp -m tcp --dport 29500 -j ACCEPT\n");
  EXPECT_EQ(FirewallCheck({{29500, 29500}}, f, "linux", false).status,
            Status::kWarn);
  Check c = FirewallCheck({{29500, 29500}}, f, "linux", true);
  EXPECT_EQ(c.status, Status::kFail);
  EXPECT_THAT(c.summary, HasSubstr("ephemeral ports"));
}

// ---- SecurityCheck ----

TEST(SecurityCheckTest, Rules) {
  struct Row {
    TlsAnswer server;
    bool local, client_tls, token;
    Status want;
    std::string says;
  };
  const std::vector<Row> rows = {
      {TlsAnswer::kPlaintext, false, false, true, Status::kWarn,
       "without TLS across hosts"},
      {TlsAnswer::kPlaintext, true, false, false, Status::kPass, "this host"},
      {TlsAnswer::kPlaintext, false, true, true, Status::kFail, "plaintext"},
      {TlsAnswer::kTls, false, false, true, Status::kFail, "speaks TLS"},
      {TlsAnswer::kTls, false, true, true, Status::kPass, "TLS"},
      {TlsAnswer::kUnknown, false, true, true, Status::kInfo, "not checked"},
  };
  for (const Row& r : rows) {
    Check c =
        SecurityCheck("node0:29400", r.local, r.server, r.client_tls, r.token);
    EXPECT_EQ(c.id, "security");
    EXPECT_EQ(c.status, r.want) << c.summary;
    EXPECT_THAT(c.summary, HasSubstr(r.says));
    if (c.status == Status::kWarn || c.status == Status::kFail) {
      EXPECT_FALSE(c.fix.empty());
    }
  }
}

// ---- EnvironmentCheck ----

TEST(EnvironmentCheckTest, CleanPassesConflictsFail) {
  EXPECT_EQ(EnvironmentCheck({{"PATH", "/bin"}}, "", 0, "linux").status,
            Status::kPass);
  Check c =
      EnvironmentCheck({{"RANK", "4"}, {"WORLD_SIZE", "2"}}, "", 0, "linux");
  EXPECT_EQ(c.status, Status::kFail);
  EXPECT_EQ(c.summary,
            "conflicting rank variables: RANK=4 is not below WORLD_SIZE=2");
  EXPECT_THAT(c.commands, ElementsAre("unset RANK WORLD_SIZE"));
  Check w =
      EnvironmentCheck({{"RANK", "4"}, {"WORLD_SIZE", "2"}}, "", 0, "windows");
  EXPECT_THAT(w.commands, ElementsAre("Remove-Item Env:RANK, Env:WORLD_SIZE"));
}

TEST(EnvironmentCheckTest, StaleAndDifferingValuesWarn) {
  Check c = EnvironmentCheck({{"MASTER_PORT", "29501"}}, "", 29500, "linux");
  EXPECT_EQ(c.status, Status::kWarn);
  EXPECT_THAT(c.evidence,
              Contains("MASTER_PORT=29501 differs from --master-port=29500"));
  Check pet = EnvironmentCheck({{"PET_NNODES", "2"}}, "", 0, "linux");
  EXPECT_EQ(pet.status, Status::kWarn);
  EXPECT_EQ(pet.summary, "PET_* variables change muster's flags");
  EXPECT_THAT(pet.commands, ElementsAre("unset PET_NNODES"));
}

// ---- GpuCheck ----

TEST(GpuCheckTest, NoDriverIsInfo) {
  GpuFacts g;
  g.cuda.error = "libcuda.so.1: cannot open shared object file";
  g.nccl_loaded = true;
  g.nccl_version = "2.28.9";
  g.nccl_path = "/usr/lib/libnccl.so.2";
  Check c = GpuCheck(g, {});
  EXPECT_EQ(c.status, Status::kInfo);
  EXPECT_EQ(c.summary,
            "no NVIDIA driver or GPU: CPU training with Gloo (NCCL 2.28.9 is "
            "installed but needs a GPU)");
}

TEST(GpuCheckTest, BrokenDriversFail) {
  GpuFacts g;
  g.kernel_module = "NVRM version: 550.54";
  g.device_nodes = 2;
  EXPECT_THAT(GpuCheck(g, {}).summary, HasSubstr("cannot be loaded"));
  g.cuda.timed_out = true;
  EXPECT_EQ(GpuCheck(g, {}).summary, "cuInit hangs: the driver is stuck");
  g.cuda = CudaFacts();
  g.cuda.loaded = true;
  g.cuda.init_rc = 803;
  g.cuda.init_error = "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
  Check c = GpuCheck(g, {});
  EXPECT_EQ(c.status, Status::kFail);
  EXPECT_THAT(c.fix, Contains(HasSubstr("differ in version")));
}

TEST(GpuCheckTest, GpusWithAndWithoutNccl) {
  GpuFacts g;
  g.device_nodes = 2;
  g.cuda.loaded = true;
  g.cuda.init_rc = 0;
  g.cuda.devices = 0;
  EXPECT_EQ(GpuCheck(g, {}).status, Status::kWarn);
  g.cuda.devices = 2;
  g.cuda.names = {"H100", "H100"};
  Check no_nccl = GpuCheck(g, {{"CUDA_VISIBLE_DEVICES", "0,1"}});
  EXPECT_EQ(no_nccl.status, Status::kWarn);
  EXPECT_THAT(no_nccl.evidence, Contains("CUDA_VISIBLE_DEVICES='0,1'"));
  g.nccl_loaded = true;
  g.nccl_version = "2.28.9";
  Check c = GpuCheck(g, {});
  EXPECT_EQ(c.status, Status::kPass);
  EXPECT_EQ(c.summary, "2 GPU(s), NCCL 2.28.9");
  EXPECT_THAT(c.evidence, Contains("GPU 1: H100"));
}

// ---- Plan and report ----

// The plan for `o`, which must parse.
Plan PlanFor(const Options& o) {
  absl::StatusOr<Plan> plan = MakePlan(o);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : Plan();
}

TEST(PlanTest, StaticModeProbesBothPortsOfTheMaster) {
  Options o;
  o.master_addr = "10.0.0.7";
  auto plan = MakePlan(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->targets.size(), 2u);
  EXPECT_EQ(plan->targets[0].title, "master 10.0.0.7:29500");
  EXPECT_EQ(plan->targets[1].id, "endpoint");
  EXPECT_EQ(plan->targets[1].hp.port, 29400);
  EXPECT_THAT(plan->local_ports, ElementsAre(29400, 29500));
}

TEST(PlanTest, PeersWithoutPortTakeThePortsAndBadAddressesAreNamed) {
  Options o;
  o.peers = {"node2"};
  o.ports = {{29400, 29402}};
  auto plan = MakePlan(o);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->targets.size(), 3u);
  EXPECT_EQ(plan->targets[2].title, "peer node2:29402");
  o.rdzv_endpoint = "node0:abc";
  auto bad = MakePlan(o);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              StartsWith("--rdzv-endpoint: "));
}

TEST(PlanTest, EveryMusterdReplicaIsATarget) {
  Options o;
  o.rdzv_endpoint = "m0:29400,m1";  // PET_RDZV_ENDPOINT as the agents get it
  auto plan = MakePlan(o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->targets.size(), 2u);
  EXPECT_EQ(plan->targets[0].title, "rdzv endpoint m0:29400");
  EXPECT_EQ(plan->targets[1].title, "rdzv endpoint m1:29400");
  o.rdzv_endpoint = "m0,,m1";
  auto bad = MakePlan(o);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("entry 2 is empty"));
}

TEST(PlanTest, LocalTargetsDecideWhichPortsThisHostServes) {
  Options o;
  o.master_addr = "10.0.0.5";
  const Plan plan = PlanFor(o);
  Facts f;
  f.host.hostname = "node1";
  f.interfaces = Host();
  f.probes = {Probe("10.0.0.5", 29500, ProbeOutcome::kRefused, "10.0.0.5"),
              Probe("10.0.0.5", 29400, ProbeOutcome::kRefused, "10.0.0.5")};
  const std::vector<bool> local = LocalTargets(plan, f);
  EXPECT_THAT(local, ElementsAre(true, true));
  std::vector<PortUse> uses = PortUses(plan, local);
  ASSERT_EQ(uses.size(), 2u);
  EXPECT_EQ(uses[0].why, "master port");
  EXPECT_TRUE(uses[1].muster_ok);
  // Nothing local: muster's defaults, only warned about.
  uses = PortUses(plan, {false, false});
  ASSERT_EQ(uses.size(), 1u);
  EXPECT_EQ(uses[0].why, "musterd's default");
  EXPECT_FALSE(uses[0].required);
}

TEST(DiagnoseTest, ChecksInTheReportsOrder) {
  Options o;
  o.rdzv_endpoint = "node0:29400";
  Facts f;
  f.interfaces = Host();
  f.host = Resolved();
  f.advertised_address = "10.0.0.5";
  f.probes = {Probe("node0", 29400, ProbeOutcome::kOpen, "10.0.0.9")};
  f.routes = {{"10.0.0.9", "10.0.0.5"}};
  f.security.endpoint_tls = {TlsAnswer::kTls};
  f.security.client_tls = true;
  Report r = Diagnose(PlanFor(o), f);
  std::vector<std::string> ids;
  for (const Check& c : r.checks) ids.push_back(c.id);
  EXPECT_THAT(ids, ElementsAre("endpoint", "ports", "hostname", "interfaces",
                               "firewall", "security", "environment", "gpu"));
  EXPECT_EQ(r.hostname, "node1");
  EXPECT_EQ(r.ExitStatus(), 0);
  EXPECT_EQ(r.checks[5].status, Status::kPass);
}

}  // namespace
}  // namespace muster::doctor
