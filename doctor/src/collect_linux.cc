// The Linux collector: the network through platform::Net, the firewall
// through platform::ToolRunner, and the files only Linux has (/etc/hosts,
// /proc/sys/net/ipv4/ip_local_port_range, the NVIDIA driver's), read with the
// standard library: no OS call here.
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "doctor/src/collect_net.h"
#include "doctor/src/gpu_facts.h"
#include "muster/doctor/collector.h"
#include "muster/platform/dynamic_library.h"

namespace muster::doctor {
namespace {

const absl::Duration kToolTimeout = absl::Seconds(5);
const absl::Duration kCudaTimeout = absl::Seconds(20);

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

PortRange EphemeralRange() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  int a = 0, b = 0;
  if (f >> a >> b && a > 0 && b >= a) return {a, b};
  return {32768, 60999};
}

class LinuxCollector final : public Collector {
 public:
  LinuxCollector(platform::Net& net, platform::ToolRunner& tools,
                 LinuxCollectorOptions options)
      : net_(net), tools_(tools), options_(std::move(options)) {}

  Facts Collect(const Plan& plan,
                const std::map<std::string, std::string>& env) override {
    Facts f;
    f.env = env;
    internal::CollectNetworkFacts(plan, net_, &f);
    f.host.hosts_file = ReadFile(options_.hosts_file);
    f.firewall = Firewall(env);
    if (options_.gpu) f.gpu = internal::CollectGpuFacts(kCudaTimeout);
    return f;
  }

 private:
  FirewallFacts Firewall(const std::map<std::string, std::string>& env) {
    FirewallFacts w;
    auto run = [&](const std::vector<std::string>& argv) {
      return tools_.Run(argv, env, kToolTimeout);
    };
    w.nft = run({"nft", "list", "ruleset"});
    w.iptables = run({"iptables", "-S"});
    w.ip6tables = run({"ip6tables", "-S"});
    w.ufw = run({"ufw", "status"});
    w.firewalld = run({"firewall-cmd", "--state"});
    if (w.firewalld.found && !w.firewalld.timed_out &&
        w.firewalld.exit_code == 0) {
      w.firewalld_ports = run({"firewall-cmd", "--list-ports"});
      w.firewalld_services = run({"firewall-cmd", "--list-services"});
    }
    w.ephemeral = EphemeralRange();
    w.root = platform::RunningAsAdministrator();
    return w;
  }

  platform::Net& net_;
  platform::ToolRunner& tools_;
  const LinuxCollectorOptions options_;
};

}  // namespace

std::unique_ptr<Collector> NewLinuxCollector(platform::Net& net,
                                             platform::ToolRunner& tools,
                                             LinuxCollectorOptions options) {
  return std::make_unique<LinuxCollector>(net, tools, std::move(options));
}

std::unique_ptr<Collector> NewSystemCollector() {
  return NewLinuxCollector(platform::SystemNet(), platform::SystemToolRunner());
}

}  // namespace muster::doctor
