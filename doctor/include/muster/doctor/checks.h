// The checks: each a pure function from facts to one finding (status, the
// cause in one sentence, evidence, and the fix with commands for the target
// OS). Diagnose runs them all in the report's order. No check touches the
// host; tests drive every one with hand-made facts.
#ifndef MUSTER_DOCTOR_CHECKS_H_
#define MUSTER_DOCTOR_CHECKS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "muster/doctor/facts.h"
#include "muster/doctor/report.h"

namespace muster::doctor {

// The targets to probe: the endpoint, the master (and in static mode its
// rendezvous port 29400), each peer (without a port: each --ports port, at
// most 8, else the master port). INVALID_ARGUMENT ("--rdzv-endpoint: ...",
// "--peer: ...") for an address that does not parse.
absl::StatusOr<Plan> MakePlan(const Options& options);

// Whether each target is this host: "localhost", this host name, a loopback
// address or an address of one of the interfaces (from the probe's resolved
// address: no second DNS lookup).
std::vector<bool> LocalTargets(const Plan& plan, const Facts& facts);
// The ports this host serves for the job: --ports, the endpoint and master
// ports of local targets; when none, muster's defaults (only warned about).
std::vector<PortUse> PortUses(const Plan& plan, const std::vector<bool>& local);

// Connectivity to one target: PASS open; refused: FAIL for a remote
// endpoint, else WARN; FAIL filtered, rejected (with the firewall command),
// unreachable, DNS. `sockets`: those on this host (for who listens).
Check TargetCheck(const Target& target, bool local, const ProbeResult& probe,
                  const std::string& os,
                  const std::vector<platform::TcpSocket>& sockets);
// Local ports taken, and by whom: FAIL for a required one, WARN otherwise;
// PASS when free or served by muster where muster should serve.
Check PortsCheck(const std::vector<PortUse>& uses,
                 const std::map<int, int>& bind_errors,
                 const std::vector<platform::TcpSocket>& sockets,
                 const std::string& os);
// The host name resolving to loopback (the 127.0.1.1 trap) or not at all:
// FAIL across nodes, WARN on one; PASS when GLOO_SOCKET_IFNAME avoids it.
Check HostnameCheck(const HostnameFacts& host,
                    const std::vector<InterfaceAddress>& interfaces,
                    const std::map<std::string, std::string>& env,
                    bool multi_node, const std::string& os);
// The interfaces NCCL, Gloo and libmuster_comm pick: FAIL when a variable
// names none; WARN for an unreachable choice, a down interface, or a choice
// that differs from the route to a peer.
Check InterfacesCheck(const std::vector<InterfaceAddress>& interfaces,
                      const HostnameFacts& host,
                      const std::map<std::string, std::string>& env,
                      const std::string& advertised_address,
                      const std::vector<std::string>& peer_addresses,
                      const std::map<std::string, std::string>& routes,
                      bool multi_node, const std::string& os);
// Local firewall rules on `ports`: FAIL when they block, WARN when they may
// (or block ephemeral ports, FAIL across nodes; or cannot be read), PASS
// else; always with the command that opens the ports on `os`.
Check FirewallCheck(const std::vector<PortRange>& ports,
                    const FirewallFacts& firewall, const std::string& os,
                    bool multi_node);
// Whether the job talks to musterd at `endpoint` over TLS: FAIL for a
// plaintext/TLS mismatch, WARN for plaintext across hosts, PASS for TLS or
// plaintext on this host only, INFO when nothing answered.
Check SecurityCheck(const std::string& endpoint, bool local, TlsAnswer server,
                    bool client_tls, bool has_token);
// RANK/WORLD_SIZE/MASTER_* and PET_* in the environment: FAIL when they
// conflict, WARN when set (stale exports, a nested job), PASS when clean.
Check EnvironmentCheck(const std::map<std::string, std::string>& env,
                       const std::string& master_addr, int master_port,
                       const std::string& os);
// CUDA driver, GPUs and NCCL: INFO without a driver, FAIL when the driver is
// broken, WARN for no GPU or no NCCL, PASS else.
Check GpuCheck(const GpuFacts& gpu,
               const std::map<std::string, std::string>& env);

// Every check, in the report's order: targets, ports, host name,
// interfaces, firewall, security (per endpoint), environment, GPU.
Report Diagnose(const Plan& plan, const Facts& facts);

}  // namespace muster::doctor

#endif  // MUSTER_DOCTOR_CHECKS_H_
