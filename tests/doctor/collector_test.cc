// The Linux collector over a FakeNet and a FakeToolRunner: it must gather
// what the checks read (probes, routes, sockets and binds on the plan's
// ports, the host name, the firewall tools' output) and Diagnose must turn
// those facts into the findings a user sees. No network, no root.
#include "muster/doctor/collector.h"

#include <cerrno>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/doctor/checks.h"
#include "platform/fake/fake_net.h"

namespace muster::doctor {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

const Check& Find(const Report& r, const std::string& id) {
  for (const Check& c : r.checks) {
    if (c.id == id) return c;
  }
  static const Check none;
  ADD_FAILURE() << "no check " << id;
  return none;
}

class CollectorTest : public ::testing::Test {
 protected:
  CollectorTest() {
    net_.hostname = "node1";
    net_.AddInterface("lo", "127.0.0.1", 8)
        .AddInterface("eth0", "10.0.0.5", 24)
        .AddInterface("lo", "::1", 128);
    platform::Resolution me;
    me.ok = true;
    me.addresses = {"127.0.1.1"};
    net_.resolutions["node1"] = me;
    platform::Resolution node2;
    node2.ok = true;
    node2.addresses = {"10.0.0.7"};
    net_.resolutions["node2"] = node2;
    net_.routes["10.0.0.7"] = "10.0.0.5";
  }

  Report Run(const Options& options, Facts* facts_out = nullptr) {
    auto plan = MakePlan(options);
    EXPECT_TRUE(plan.ok()) << plan.status();
    LinuxCollectorOptions o;
    o.gpu = false;
    o.hosts_file = "/nonexistent/hosts";
    auto collector = NewLinuxCollector(net_, tools_, o);
    Facts facts = collector->Collect(*plan, {{"PATH", "/usr/bin"}});
    if (facts_out != nullptr) *facts_out = facts;
    return Diagnose(*plan, facts);
  }

  platform::FakeNet net_;
  platform::FakeToolRunner tools_;
};

TEST_F(CollectorTest, FilteredMasterAndDropPolicyGiveTheCauseAndTheFix) {
  platform::ConnectAttempt dropped;
  dropped.timed_out = true;
  dropped.arp_state = "complete";
  net_.connects["10.0.0.7:29500"] = dropped;
  tools_.Set("iptables -S", "-P INPUT DROP\n");
  Options o;
  o.master_addr = "node2";
  o.ports = {{29500, 29500}};
  Facts facts;
  Report r = Run(o, &facts);
  ASSERT_EQ(facts.probes.size(), 2u);
  EXPECT_EQ(facts.probes[0].outcome, ProbeOutcome::kFiltered);
  EXPECT_EQ(facts.routes.at("10.0.0.7"), "10.0.0.5");
  EXPECT_TRUE(facts.firewall.iptables.found);
  EXPECT_FALSE(facts.firewall.nft.found);
  const Check& master = Find(r, "master");
  EXPECT_EQ(master.status, Status::kFail);
  EXPECT_THAT(master.summary, HasSubstr("the host is up but a firewall drops"));
  const Check& firewall = Find(r, "firewall");
  EXPECT_EQ(firewall.status, Status::kFail);
  EXPECT_THAT(firewall.commands,
              Contains("iptables -I INPUT -p tcp --dport 29500 -j ACCEPT"));
  // The host name is on 127.0.1.1 and the job spans nodes.
  EXPECT_EQ(Find(r, "hostname").status, Status::kFail);
  EXPECT_EQ(r.ExitStatus(), 1);
  // firewalld was not running, so its zone was not asked.
  EXPECT_THAT(tools_.ran, Contains("firewall-cmd --state"));
  EXPECT_THAT(tools_.ran, Not(Contains("firewall-cmd --list-ports")));
}

TEST_F(CollectorTest, LocalEndpointPortTakenByAnotherProcess) {
  net_.bind_errors[29400] = EADDRINUSE;
  platform::TcpSocket s;
  s.state = "LISTEN";
  s.local = "0.0.0.0:29400";
  s.local_port = 29400;
  s.pid = 4242;
  s.command = "python -m http.server 29400";
  net_.sockets = {s};
  Options o;
  o.rdzv_endpoint = "10.0.0.5:29400";
  Facts facts;
  Report r = Run(o, &facts);
  EXPECT_THAT(facts.bind_errors,
              Contains(std::pair<const int, int>(29400, EADDRINUSE)));
  const Check& ports = Find(r, "ports");
  EXPECT_EQ(ports.status, Status::kFail);
  EXPECT_THAT(ports.commands,
              ElementsAre("kill 4242   # python -m http.server 29400"));
  // Refused on a local endpoint: a warning (an agent here would embed it).
  EXPECT_EQ(Find(r, "endpoint").status, Status::kWarn);
}

TEST_F(CollectorTest, FirewalldZoneIsReadOnlyWhenItRuns) {
  tools_.Set("firewall-cmd --state", "running\n");
  tools_.Set("firewall-cmd --list-ports", "29400/tcp\n");
  tools_.Set("firewall-cmd --list-services", "ssh\n");
  Options o;
  o.ports = {{29400, 29400}};
  Facts facts;
  Report r = Run(o, &facts);
  EXPECT_THAT(tools_.ran, Contains("firewall-cmd --list-ports"));
  EXPECT_EQ(facts.firewall.firewalld_ports.output, "29400/tcp\n");
  EXPECT_EQ(Find(r, "firewall").status, Status::kPass);
}

}  // namespace
}  // namespace muster::doctor
