// The Windows collector's logic: portable (it calls the OS only through
// platform::Net and platform::ToolRunner), so the Linux tests drive it over
// fakes fed with recorded netsh output; system_collector_windows.cc hands it
// the real ones. netsh is asked in English terms and answers in the display
// language: the checks read English output only and report anything else
// as unknown.
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "doctor/src/collect_net.h"
#include "muster/doctor/collector.h"
#include "muster/doctor/firewall.h"

namespace muster::doctor {
namespace {

const absl::Duration kToolTimeout = absl::Seconds(5);
// Windows' default dynamic (ephemeral) port range since Vista.
constexpr PortRange kWindowsDynamicPorts{49152, 65535};

bool Succeeded(const platform::ToolResult& r) {
  return r.found && !r.timed_out && r.exit_code == 0;
}

std::string EnvValue(const std::map<std::string, std::string>& env,
                     const std::string& name) {
  for (const auto& [k, v] : env) {
    if (absl::EqualsIgnoreCase(k, name)) return v;
  }
  return "";
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// %SystemRoot%\System32\drivers\etc\hosts, unless the options name one.
std::string HostsPath(const std::string& configured,
                      const std::map<std::string, std::string>& env) {
  if (!configured.empty()) return configured;
  std::string root = EnvValue(env, "SystemRoot");
  if (root.empty()) root = "C:\\Windows";
  return root + "\\System32\\drivers\\etc\\hosts";
}

class WindowsCollector final : public Collector {
 public:
  WindowsCollector(platform::Net& net, platform::ToolRunner& tools,
                   const WindowsCollectorOptions& options)
      : hosts_file_(options.hosts_file), net_(net), tools_(tools) {}

  Facts Collect(const Plan& plan,
                const std::map<std::string, std::string>& env) override {
    Facts f;
    internal::CollectNetworkFacts(plan, net_, &f);
    f.env = env;
    f.host.hosts_path = HostsPath(hosts_file_, env);
    f.host.hosts_file = ReadFile(f.host.hosts_path);
    f.firewall = Firewall(env);
    f.gpu.not_read =
        "muster doctor does not read GPUs on Windows yet (nvcuda.dll); run "
        "nvidia-smi";
    return f;
  }

 private:
  FirewallFacts Firewall(const std::map<std::string, std::string>& env) {
    FirewallFacts w;
    w.windows = true;
    auto run = [&](const std::vector<std::string>& argv) {
      return tools_.Run(argv, env, kToolTimeout);
    };
    w.netsh_profiles = run({"netsh", "advfirewall", "show", "currentprofile"});
    // The rules matter only with the profiles known (their default action).
    if (Succeeded(w.netsh_profiles) &&
        ParseNetshProfiles(w.netsh_profiles.output).ok()) {
      w.netsh_rules = run({"netsh", "advfirewall", "firewall", "show", "rule",
                           "name=all", "dir=in", "verbose"});
    }
    w.ephemeral = kWindowsDynamicPorts;
    platform::ToolResult dyn =
        run({"netsh", "int", "ipv4", "show", "dynamicport", "tcp"});
    if (Succeeded(dyn)) {
      if (auto r = ParseNetshDynamicPorts(dyn.output)) w.ephemeral = *r;
    }
    return w;
  }

  const std::string hosts_file_;
  platform::Net& net_;
  platform::ToolRunner& tools_;
};

}  // namespace

std::unique_ptr<Collector> NewWindowsCollector(
    platform::Net& net, platform::ToolRunner& tools,
    WindowsCollectorOptions options) {
  return std::make_unique<WindowsCollector>(net, tools, options);
}

}  // namespace muster::doctor
