// The host's facts as plain structs: what a collector gathers (a probe of
// each target, interfaces, routes, sockets on the ports, the host name, the
// firewall tools' output, GPUs) and the checks read. Tests build them by
// hand; collector.h fills them from the live host.
#ifndef MUSTER_DOCTOR_FACTS_H_
#define MUSTER_DOCTOR_FACTS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "muster/common/net.h"
#include "muster/common/probe.h"
#include "muster/doctor/interfaces.h"
#include "muster/doctor/ports.h"
#include "muster/platform/net.h"
#include "muster/platform/tool_runner.h"

namespace muster::doctor {

// What `muster doctor` was asked to check (its command line, with the PET_*
// spellings already applied).
struct Options {
  std::string rdzv_endpoint;       // HOST[:PORT]; "" when not given
  std::string master_addr;         // "" when not given
  int master_port = 0;             // 0 when not given (29500 is used)
  std::vector<std::string> peers;  // HOST[:PORT] each
  std::vector<PortRange> ports;    // --ports; empty when not given
  std::string os = "linux";        // fix commands for: linux | windows
  absl::Duration timeout = absl::Seconds(2);  // of each connect probe
};

inline constexpr int kDefaultRdzvPort = 29400;
inline constexpr int kDefaultMasterPort = 29500;
// At most this many ports are bound and decided; at most kMaxTargets probed.
inline constexpr int kMaxPortsChecked = 4096;
inline constexpr int kMaxTargets = 64;

// One address:port to probe.
struct Target {
  std::string id;     // "endpoint", "master", "peer"
  std::string title;  // "rdzv endpoint node0:29400"
  HostPort hp;
};

// A local port the job serves, and how much it matters that it is taken.
struct PortUse {
  PortRange range;
  std::string why;         // "--ports", "master port", ...
  bool required = false;   // FAIL when taken (else WARN)
  bool muster_ok = false;  // a muster/musterd holding it is what we want
};

// The targets to probe, from the options (plan.cc).
struct Plan {
  Options options;
  std::vector<Target> targets;           // at most kMaxTargets
  int master_port = kDefaultMasterPort;  // options.master_port or 29500
  // Every port whose bind and sockets the collector looks at: --ports, the
  // targets' ports and muster's defaults (at most kMaxPortsChecked + a few).
  std::vector<int> local_ports;
};

struct HostnameFacts {
  std::string hostname;
  bool resolved = false;      // the resolver answered with addresses
  std::string resolve_error;  // its message when it did not
  std::vector<ResolvedAddress> addresses;  // in the resolver's order
  std::string hosts_file;                  // /etc/hosts; "" when unreadable
  std::string hosts_path = "/etc/hosts";   // where it was read
};

// The output of each firewall tool (found = false when not installed).
struct FirewallFacts {
  platform::ToolResult nft;                 // nft list ruleset
  platform::ToolResult iptables;            // iptables -S
  platform::ToolResult ip6tables;           // ip6tables -S
  platform::ToolResult ufw;                 // ufw status
  platform::ToolResult firewalld;           // firewall-cmd --state
  platform::ToolResult firewalld_ports;     // --list-ports (when running)
  platform::ToolResult firewalld_services;  // --list-services
  // net.ipv4.ip_local_port_range: where Gloo and NCCL listen.
  PortRange ephemeral{32768, 60999};
  bool root = false;  // whether the collector ran with full rights
  // Windows (the collector there reads these instead of the tools above):
  // Windows Firewall through netsh, whose English output is parsed (a
  // localized one reads as unknown), and the dynamic port range
  // (`ephemeral`, from `netsh int ipv4 show dynamicport tcp`).
  bool windows = false;
  platform::ToolResult netsh_profiles;  // netsh advfirewall show currentprofile
  // netsh advfirewall firewall show rule name=all dir=in verbose
  platform::ToolResult netsh_rules;
};

struct CudaFacts {
  bool loaded = false;  // libcuda.so.1 could be loaded
  std::string error;    // why not
  std::string path;
  int driver_version = 0;  // cuDriverGetVersion: 12040 for 12.4
  int init_rc = -1;        // cuInit's result
  std::string init_error;  // its name
  int devices = 0;
  std::vector<std::string> names;
  bool timed_out = false;  // cuInit did not return
};

struct GpuFacts {
  // Why the GPU was not looked at ("" when it was): the Windows collector
  // does not read nvcuda.dll yet.
  std::string not_read;
  std::string kernel_module;  // /proc/driver/nvidia/version's first line
  int device_nodes = 0;       // /dev/nvidia[0-9]*
  bool nvidiactl = false;
  CudaFacts cuda;
  bool nccl_loaded = false;  // libnccl.so.2
  std::string nccl_error;
  std::string nccl_path;
  std::string nccl_version;  // "2.28.9"; "" when unknown
};

// What musterd at an endpoint speaks.
enum class TlsAnswer { kUnknown, kTls, kPlaintext };

struct SecurityFacts {
  std::vector<TlsAnswer> endpoint_tls;  // one per Plan target (kUnknown for
                                        // others and when nothing answered)
  bool client_tls = false;  // the job's agents would use TLS (tls_ca set)
  bool token = false;       // the job has a token
};

struct Facts {
  std::map<std::string, std::string> env;
  std::vector<ProbeResult> probes;  // one per Plan target, in its order
  std::vector<InterfaceAddress> interfaces;
  std::string advertised_address;  // what this node advertises to peers
  // Peer address -> the local address this host reaches it from ("" when
  // there is no route); for every probed address that is not loopback.
  std::map<std::string, std::string> routes;
  std::vector<platform::TcpSocket> sockets;  // on the plan's local_ports
  std::map<int, int> bind_errors;  // port -> errno; absent when it binds
  HostnameFacts host;
  FirewallFacts firewall;
  GpuFacts gpu;
  SecurityFacts security;
};

}  // namespace muster::doctor

#endif  // MUSTER_DOCTOR_FACTS_H_
