// Collectors gather the host's facts for a Plan: the Linux one
// (doctor/src/collect_linux.cc) and the Windows one
// (doctor/src/collect_windows.cc, made the system's by
// doctor/src/system_collector_windows.cc). Both read the network through
// platform::Net and run firewall tools through platform::ToolRunner, so tests
// can hand them fakes.
#ifndef MUSTER_DOCTOR_COLLECTOR_H_
#define MUSTER_DOCTOR_COLLECTOR_H_

#include <map>
#include <memory>
#include <string>

#include "muster/doctor/facts.h"
#include "muster/platform/net.h"
#include "muster/platform/tool_runner.h"

namespace muster::doctor {

class Collector {
 public:
  virtual ~Collector() = default;
  // Probes the plan's targets (concurrently, each within its timeout), and
  // reads interfaces, routes, sockets and binds on the plan's ports, the host
  // name, the firewall tools (at most 5 s each) and the GPU (at most 20 s
  // for a stuck driver). Leaves facts.security to the caller (it needs the
  // rendezvous client). Never fails: what cannot be read is recorded as such.
  virtual Facts Collect(const Plan& plan,
                        const std::map<std::string, std::string>& env) = 0;
};

struct LinuxCollectorOptions {
  bool gpu = true;  // load libcuda/libnccl and look
  std::string hosts_file = "/etc/hosts";
};
// The Linux collector (doctor/src/collect_linux.cc; not on Windows).
// `net` and `tools` must outlive it.
std::unique_ptr<Collector> NewLinuxCollector(
    platform::Net& net, platform::ToolRunner& tools,
    LinuxCollectorOptions options = {});
struct WindowsCollectorOptions {
  // "": %SystemRoot%\System32\drivers\etc\hosts (SystemRoot from the
  // environment given to Collect, else C:\Windows).
  std::string hosts_file;
};
// The Windows collector (doctor/src/collect_windows.cc: portable, so that it
// is tested on Linux over fakes): the network through `net`, Windows Firewall
// and the dynamic port range through netsh run by `tools`, the hosts file.
// No GPU facts yet. `net` and `tools` must outlive it.
std::unique_ptr<Collector> NewWindowsCollector(
    platform::Net& net, platform::ToolRunner& tools,
    WindowsCollectorOptions options = {});
// This platform's collector over the real host.
std::unique_ptr<Collector> NewSystemCollector();

}  // namespace muster::doctor

#endif  // MUSTER_DOCTOR_COLLECTOR_H_
