// `muster doctor`: names why the nodes of a job cannot talk, and prints the
// fix.
//
//   muster doctor --rdzv-endpoint=node0:29400 --peer node1 --ports 29400-29510
//   muster doctor --master-addr=10.0.0.5 --master-port=29500 --json
//
// Each check ends PASS, INFO, WARN or FAIL with its evidence and its fix:
// connectivity to the endpoint, the master and each peer (refused, filtered,
// rejected, unreachable, DNS: see muster/common/probe.h), local ports in use
// and by whom, the host name resolving to loopback (the 127.0.1.1 trap),
// interface choice as Gloo and NCCL make it, local firewall rules that touch
// the ports and the command that opens them (Linux or Windows), CUDA/NCCL
// presence, and conflicting RANK/WORLD_SIZE/MASTER_* in the environment.
//
// The pure rules (NCCL and Gloo interface selection, firewall rule parsing,
// output formatting) are declared here so that tests can drive them with
// synthetic input.
#ifndef MUSTER_CLI_DOCTOR_H_
#define MUSTER_CLI_DOCTOR_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "muster/rendezvous/security.h"
#include "nlohmann/json.hpp"

namespace muster::cli {

// Runs `muster doctor ARGS...` (`args` without "doctor"; `env` is the
// environment). Prints the report (a table, or JSON with --json) to stdout.
// Returns 0 when no check failed, 1 when one did, 2 for a bad command line.
// Blocks for the checks: about --timeout for the probes (run concurrently),
// and at most a few seconds for each external firewall command.
int RunDoctor(const std::vector<std::string>& args,
              const std::map<std::string, std::string>& env);

namespace doctor {

enum class Status { kPass, kInfo, kWarn, kFail };
// "PASS", "INFO", "WARN", "FAIL".
absl::string_view StatusName(Status status);

struct Check {
  std::string id;     // a stable key: "endpoint", "master", "peer", "ports",
                      // "hostname", "interfaces", "firewall", "environment",
                      // "gpu"
  std::string title;  // what was checked: "master 10.0.0.5:29500"
  Status status = Status::kInfo;
  std::string summary;                // one line: the finding
  std::vector<std::string> evidence;  // what was seen
  std::vector<std::string> fix;       // what to do, in sentences
  std::vector<std::string> commands;  // commands that do it, verbatim
  nlohmann::json data = nlohmann::json::object();  // facts for programs
};

struct Report {
  std::string hostname;
  std::string os;  // what the fix commands are written for: linux | windows
  std::vector<Check> checks;
  // 1 when a check failed, else 0.
  int ExitStatus() const;
};

// The report as an aligned table with evidence and fixes under each row, and
// a count line at the end. `width` wraps prose (commands are never wrapped).
std::string FormatText(const Report& report, int width = 100);
// {"host", "os", "checks": [{"id", "title", "status", "summary", "evidence",
// "fix", "commands", "data"}], "counts": {"pass", "info", "warn", "fail"},
// "exit_status"}, pretty-printed.
std::string FormatJson(const Report& report);

// ---- Interfaces, as Gloo and NCCL choose them ----

// One address of one interface, in getifaddrs order (Linux lists every IPv4
// address before the IPv6 ones).
struct InterfaceAddress {
  std::string name;
  int family = 0;  // AF_INET or AF_INET6
  std::string address;
  int prefix_len = 0;
  bool up = false;
  bool running = false;
  bool loopback = false;
};
std::vector<InterfaceAddress> ListInterfaceAddresses();

struct InterfaceChoice {
  std::vector<InterfaceAddress> chosen;  // in the library's order
  std::string rule;                      // how the choice was made, in words
  std::string error;  // what the library fails with; empty when it does not
};

// NCCL's socket interface choice (ncclFindInterfaces, NCCL 2.2x). With
// NCCL_SOCKET_IFNAME longer than one character: a comma list of name prefixes
// ("eth,ib"), "=" for exact names ("=eth0"), "^" to exclude ("^docker,lo"),
// "^=" to exclude exact names; ":port" suffixes are ignored. None matching is
// an error. Unset: "ib" interfaces; else the subnet of NCCL_COMM_ID's address;
// else anything but docker*, lo* and virbr*; else docker*, then lo, then
// virbr*. Only running interfaces count (NCCL before 2.21 also took ones that
// were down); IPv6 loopback never; NCCL_SOCKET_FAMILY=AF_INET|AF_INET6
// restricts the family; each interface once, with its first address. The
// first chosen is the bootstrap interface; the socket transport uses up to
// `max_interfaces`.
InterfaceChoice NcclSocketInterfaces(
    const std::vector<InterfaceAddress>& addresses,
    const std::map<std::string, std::string>& env, int max_interfaces = 16);

// What the host name resolves to, each address with whether this host can
// bind it.
struct ResolvedAddress {
  std::string address;
  bool bindable = false;
  bool loopback = false;
};

// Gloo's device as PyTorch's ProcessGroupGloo makes it. GLOO_SOCKET_IFNAME
// (a comma list: one device per name): the first address of the interface of
// exactly that name; a name with no address is an error ("Unable to find
// address for: X"). Unset: the first address the host name resolves to that
// can be bound, which may well be 127.0.1.1; when none can, the loopback
// address.
InterfaceChoice PytorchGlooDevice(
    const std::vector<InterfaceAddress>& addresses,
    const std::map<std::string, std::string>& env, const std::string& hostname,
    const std::vector<ResolvedAddress>& hostname_addresses);

// libmuster_comm's Gloo address: MUSTER_SOCKET_IFNAME, then
// GLOO_SOCKET_IFNAME, else this node's advertised address
// (`advertised_address`; loopback when every rank is local).
InterfaceChoice MusterCommDevice(const std::vector<InterfaceAddress>& addresses,
                                 const std::map<std::string, std::string>& env,
                                 const std::string& advertised_address);

// ---- Ports ----

struct PortRange {
  int first = 0;
  int last = 0;
  bool Contains(int port) const { return port >= first && port <= last; }
};
// "29500", "29400-29500", "29400:29500", and comma lists of those.
// INVALID_ARGUMENT naming the text when a port is outside 1..65535 or a range
// is reversed.
absl::StatusOr<std::vector<PortRange>> ParsePortRanges(absl::string_view text);
// "29400-29500,29600" (`range_sep` between first and last).
std::string PortRangesText(const std::vector<PortRange>& ranges,
                           absl::string_view range_sep = "-");

// ---- Firewall rules ----

enum class RuleVerdict {
  kAccept,
  kDrop,
  kReject,
  kJump,
  kGoto,
  kReturn,
  kNone
};

// One rule, from `iptables -S` or `nft list ruleset`.
struct FirewallRule {
  std::string source;  // "iptables", "ip6tables", "nft"
  std::string table;   // nft: "inet filter"; iptables: "filter"
  std::string chain;
  std::string text;  // as listed
  RuleVerdict verdict = RuleVerdict::kNone;
  std::string target_chain;  // for kJump / kGoto
  bool applies_to_tcp = true;
  std::vector<PortRange> dports;  // empty: any port
  bool dports_negated = false;
  bool dports_unknown = false;  // a named set or service we cannot read
  std::string dports_set;       // nft: "@name" of the set, if one is used
  // Other matches (source address, interface, rate limit, ...) limit it: it
  // may or may not apply to a peer's connection.
  bool conditional = false;
  // Never matches a new connection from another node: it matches only
  // established/related/invalid packets (ct state), or loopback only (-i lo,
  // -s 127.0.0.0/8).
  bool not_for_peers = false;
};

struct FirewallChain {
  std::string source;
  std::string table;
  std::string name;
  bool input_hook = false;  // iptables INPUT, or an nft base chain at input
  std::string policy;       // "ACCEPT"/"DROP" for base chains, else ""
};

struct FirewallRuleset {
  std::vector<FirewallChain> chains;
  std::vector<FirewallRule> rules;  // in listing order
  // nft: "inet filter input", a native base chain at the input hook where an
  // accept rule can be inserted; empty when none.
  std::string nft_input_chain;
};

// Parses `iptables -S` output (source "iptables" or "ip6tables").
FirewallRuleset ParseIptablesRules(absl::string_view text,
                                   absl::string_view source = "iptables");
// Parses `nft list ruleset`, skipping tables that iptables-nft manages (they
// are read through `iptables -S`) and `inet firewalld` (firewalld is asked
// itself).
FirewallRuleset ParseNftRuleset(absl::string_view text);

// What the rules do to a new inbound TCP connection to `port`.
struct PortDecision {
  enum Kind { kAllowed, kBlocked, kMaybe } kind = kAllowed;
  std::string by;  // the deciding rule or policy, as listed
};
PortDecision DecidePort(const FirewallRuleset& rules, int port);

// The commands that open TCP `ports` inbound. os "windows": netsh and
// PowerShell. os "linux": for `tool` "firewalld", "ufw", "nft" (needs
// `nft_chain`, e.g. "inet filter input") or "iptables"; an empty `tool` gives
// one command for each.
std::vector<std::string> OpenPortCommands(absl::string_view os,
                                          absl::string_view tool,
                                          const std::vector<PortRange>& ports,
                                          absl::string_view nft_chain = "");

// Whether the job talks to musterd at `endpoint` over TLS (doctor_security.cc):
// FAIL for a plaintext/TLS mismatch, WARN for plaintext across hosts, PASS for
// TLS or plaintext on this host only, INFO when nothing answered.
Check SecurityCheck(const std::string& endpoint, bool local,
                    rendezvous::TlsProbe server, bool client_tls,
                    bool has_token);

}  // namespace doctor
}  // namespace muster::cli

#endif  // MUSTER_CLI_DOCTOR_H_
