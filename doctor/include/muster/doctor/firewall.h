// The host firewall as `muster doctor` reads it: rules parsed from
// `iptables -S`, `nft list ruleset` and Windows' netsh, what they do to a new
// inbound TCP connection, and the commands that open ports (Linux: iptables,
// nft, ufw, firewalld; Windows: netsh and New-NetFirewallRule). Pure functions.
#ifndef MUSTER_DOCTOR_FIREWALL_H_
#define MUSTER_DOCTOR_FIREWALL_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "muster/doctor/ports.h"

namespace muster::doctor {

enum class RuleVerdict {
  kAccept,
  kDrop,
  kReject,
  kJump,
  kGoto,
  kReturn,
  kNone
};

// One rule, from `iptables -S`, `nft list ruleset` or netsh.
struct FirewallRule {
  std::string source;  // "iptables", "ip6tables", "nft", "netsh"
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

// Windows Firewall, as `netsh advfirewall` prints it in English (netsh
// speaks the system's display language: other output is not parsed and the
// firewall is reported as unknown). One profile of `show currentprofile`.
struct NetshProfile {
  std::string name;     // "Domain", "Private", "Public"
  bool on = false;      // State ON
  std::string inbound;  // "BlockInbound", "AllowInbound", "BlockInboundAlways"
};
// Errors: FAILED_PRECONDITION saying why, for output that prints nothing
// (wine's netsh is a stub that does so) or has no "<name> Profile Settings:"
// with a State (localized).
absl::StatusOr<std::vector<NetshProfile>> ParseNetshProfiles(
    absl::string_view text);
// The inbound rules of `netsh advfirewall firewall show rule name=all dir=in
// verbose` in the `profiles` that are active, as a ruleset DecidePort reads:
// one input chain per profile (source "netsh", chain = the profile's name,
// policy DROP for BlockInbound*, ACCEPT for AllowInbound or a profile that is
// off, which gets no rules). Windows applies a matching block rule before any
// allow rule whatever their order, so block rules come first in each chain;
// BlockInboundAlways ignores allow rules. Enabled TCP and any-protocol rules
// only; one limited to a program, a service, addresses, interface types or
// IPsec is conditional; one whose local port is a keyword (RPC, IPHTTPS, ...:
// the OS's own services' ports) is left out. "No rules match" is no rules.
// Errors: FAILED_PRECONDITION for output without "Rule Name:" (localized).
absl::StatusOr<FirewallRuleset> ParseNetshRules(
    absl::string_view text, const std::vector<NetshProfile>& profiles);
// `netsh int ipv4 show dynamicport tcp` ("Start Port : 49152", "Number of
// Ports : 16384"): the range; nullopt when it does not say.
std::optional<PortRange> ParseNetshDynamicPorts(absl::string_view text);

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

}  // namespace muster::doctor

#endif  // MUSTER_DOCTOR_FIREWALL_H_
