// The Windows collector: a stub for the Windows port (the next issue), not
// built on Linux. It fills the portable network facts through
// platform::SystemNet() already; the Windows port adds:
//   - the firewall through platform::SystemToolRunner(): `netsh advfirewall
//     show currentprofile` and `Get-NetFirewallRule |
//     Get-NetFirewallPortFilter` (FirewallFacts gains fields for them;
//     FirewallCheck already writes the Windows commands, netsh and
//     New-NetFirewallRule, for --os windows);
//   - the hosts file at %SystemRoot%\System32\drivers\etc\hosts;
//   - GPUs through nvcuda.dll.
#include <memory>

#include "doctor/src/collect_net.h"
#include "muster/doctor/collector.h"

namespace muster::doctor {
namespace {

class WindowsCollector final : public Collector {
 public:
  Facts Collect(const Plan& plan,
                const std::map<std::string, std::string>& env) override {
    Facts f;
    f.env = env;
    internal::CollectNetworkFacts(plan, platform::SystemNet(), &f);
    return f;
  }
};

}  // namespace

std::unique_ptr<Collector> NewSystemCollector() {
  return std::make_unique<WindowsCollector>();
}

}  // namespace muster::doctor
