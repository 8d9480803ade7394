// Local firewall rules on the job's ports, and the command that opens them.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "doctor/src/util.h"
#include "muster/doctor/checks.h"
#include "muster/doctor/firewall.h"

namespace muster::doctor {
namespace {

using internal::FirstLine;

// How a tool's answer reads in the evidence: its first line, or the
// timeout.
std::string ToolProblem(const platform::ToolResult& r) {
  return r.timed_out ? "no answer in 5 s" : FirstLine(r.output);
}

bool Failed(const platform::ToolResult& r) {
  return r.timed_out || r.exit_code != 0;
}

// What the firewall tools said, gathered for the decision.
struct ToolsRead {
  FirewallRuleset rules;
  std::vector<std::string> unreadable;  // Linux: tools; Windows: why
  std::vector<std::string> present;
  bool firewalld_running = false;
  bool ufw_active = false;
  std::vector<PortRange> firewalld_open;
  nlohmann::json tools = nlohmann::json::object();
};

// nft, iptables, ip6tables, ufw and firewalld.
void ReadLinuxTools(const std::vector<PortRange>& ports,
                    const FirewallFacts& facts, Check* check, ToolsRead* t) {
  Check& c = *check;
  FirewallRuleset& rules = t->rules;
  std::vector<std::string>& unreadable = t->unreadable;
  std::vector<std::string>& present = t->present;
  bool& firewalld_running = t->firewalld_running;
  bool& ufw_active = t->ufw_active;
  nlohmann::json& tools = t->tools;
  // nftables.
  const platform::ToolResult& nft = facts.nft;
  if (!nft.found) {
    c.evidence.push_back("nft: not installed");
    tools["nft"] = "absent";
  } else if (Failed(nft)) {
    unreadable.push_back("nft");
    c.evidence.push_back(absl::StrCat("nft list ruleset: ", ToolProblem(nft)));
    tools["nft"] = "unreadable";
  } else {
    present.push_back("nft");
    FirewallRuleset n = ParseNftRuleset(nft.output);
    int count = static_cast<int>(n.rules.size());
    c.evidence.push_back(
        absl::StrCat("nft: ", count, " rules in native tables",
                     n.nft_input_chain.empty()
                         ? ""
                         : absl::StrCat(", input chain ", n.nft_input_chain)));
    tools["nft"] = {{"rules", count}, {"input_chain", n.nft_input_chain}};
    rules.nft_input_chain = n.nft_input_chain;
    for (auto& ch : n.chains) rules.chains.push_back(ch);
    for (auto& r : n.rules) rules.rules.push_back(r);
  }
  // iptables (legacy or nft backend) and ip6tables.
  struct Named {
    const char* name;
    const platform::ToolResult* result;
  };
  for (const Named& n : {Named{"iptables", &facts.iptables},
                         Named{"ip6tables", &facts.ip6tables}}) {
    const char* name = n.name;
    const platform::ToolResult& ipt = *n.result;
    if (!ipt.found) {
      c.evidence.push_back(absl::StrCat(name, ": not installed"));
      tools[name] = "absent";
      continue;
    }
    if (Failed(ipt)) {
      unreadable.push_back(name);
      c.evidence.push_back(absl::StrCat(name, " -S: ", ToolProblem(ipt)));
      tools[name] = "unreadable";
      continue;
    }
    present.push_back(name);
    FirewallRuleset r = ParseIptablesRules(ipt.output, name);
    std::string policy = "ACCEPT";
    for (const auto& ch : r.chains) {
      if (ch.input_hook) policy = ch.policy;
    }
    c.evidence.push_back(absl::StrCat(name, ": INPUT policy ", policy, ", ",
                                      r.rules.size(), " rules"));
    tools[name] = {{"rules", r.rules.size()}, {"input_policy", policy}};
    for (auto& ch : r.chains) rules.chains.push_back(ch);
    for (auto& x : r.rules) rules.rules.push_back(x);
  }
  // ufw.
  const platform::ToolResult& ufw = facts.ufw;
  if (!ufw.found) {
    tools["ufw"] = "absent";
    c.evidence.push_back("ufw: not installed");
  } else if (Failed(ufw)) {
    tools["ufw"] = "unreadable";
    c.evidence.push_back(absl::StrCat("ufw status: ", ToolProblem(ufw)));
  } else {
    ufw_active = absl::StrContains(ufw.output, "Status: active");
    tools["ufw"] = ufw_active ? "active" : "inactive";
    c.evidence.push_back(
        absl::StrCat("ufw: ", ufw_active ? "active" : "inactive"));
    if (ufw_active) {
      for (absl::string_view l : absl::StrSplit(ufw.output, '\n')) {
        for (const PortRange& p : ports) {
          if (absl::StrContains(l, absl::StrCat(p.first))) {
            c.evidence.push_back(
                absl::StrCat("ufw rule: ", absl::StripAsciiWhitespace(l)));
            break;
          }
        }
      }
    }
  }
  // firewalld.
  std::vector<PortRange>& firewalld_open = t->firewalld_open;
  const platform::ToolResult& fwd = facts.firewalld;
  if (!fwd.found) {
    tools["firewalld"] = "absent";
    c.evidence.push_back("firewalld: not installed");
  } else if (Failed(fwd)) {
    tools["firewalld"] = "not running";
    c.evidence.push_back(absl::StrCat("firewalld: ", ToolProblem(fwd)));
  } else {
    firewalld_running = true;
    tools["firewalld"] = "running";
    const std::string listed = FirstLine(facts.firewalld_ports.output);
    c.evidence.push_back(absl::StrCat(
        "firewalld (default zone): ports '", listed, "', services '",
        FirstLine(facts.firewalld_services.output), "'"));
    for (absl::string_view item :
         absl::StrSplit(listed, ' ', absl::SkipEmpty())) {
      if (!absl::ConsumeSuffix(&item, "/tcp")) continue;
      PortRange pr;
      if (ParseOnePortRange(item, &pr)) firewalld_open.push_back(pr);
    }
  }
}

// Windows Firewall through netsh: the active profiles (on or off, the
// default inbound action) and the inbound rules. What cannot be read is
// recorded with why (wine's netsh prints nothing; a localized Windows prints
// what is not parsed).
void ReadWindowsFirewall(const FirewallFacts& facts, Check* check,
                         ToolsRead* t) {
  Check& c = *check;
  auto unreadable = [&](const std::string& why) {
    t->unreadable.push_back(why);
    c.evidence.push_back(why);
    if (!t->tools.contains("netsh")) t->tools["netsh"] = "unreadable";
  };
  const platform::ToolResult& pr = facts.netsh_profiles;
  if (!pr.found) {
    unreadable(pr.output.empty() ? std::string("netsh was not found")
                                 : absl::StrCat("netsh was not found: ",
                                                FirstLine(pr.output)));
    return;
  }
  if (Failed(pr)) {
    unreadable(absl::StrCat("netsh advfirewall show currentprofile: ",
                            ToolProblem(pr)));
    return;
  }
  absl::StatusOr<std::vector<NetshProfile>> profiles =
      ParseNetshProfiles(pr.output);
  if (!profiles.ok()) {
    unreadable(std::string(profiles.status().message()));
    return;
  }
  nlohmann::json listed = nlohmann::json::array();
  bool any_on = false;
  for (const NetshProfile& p : *profiles) {
    any_on = any_on || p.on;
    c.evidence.push_back(absl::StrCat(
        "Windows Firewall, ", p.name, " profile (active): ",
        p.on ? absl::StrCat("on, default inbound action ", p.inbound) : "off"));
    listed.push_back({{"name", p.name}, {"on", p.on}, {"inbound", p.inbound}});
  }
  t->tools["netsh"] = {{"profiles", listed}};
  const platform::ToolResult& rr = facts.netsh_rules;
  absl::StatusOr<FirewallRuleset> rules = absl::FailedPreconditionError(
      absl::StrCat("netsh advfirewall firewall show rule: ",
                   rr.found ? ToolProblem(rr) : "not run"));
  if (rr.found && !Failed(rr)) rules = ParseNetshRules(rr.output, *profiles);
  if (!rules.ok() && any_on) {
    t->tools["netsh"]["rules"] = "unreadable";
    unreadable(std::string(rules.status().message()));
    return;
  }
  if (!rules.ok()) {  // every active profile is off: no rule matters
    rules = FirewallRuleset();
    for (const NetshProfile& p : *profiles) {
      rules->chains.push_back({"netsh", "", p.name, true, "ACCEPT"});
    }
  }
  t->present.push_back("netsh");
  std::set<std::string> distinct;
  for (const FirewallRule& r : rules->rules) distinct.insert(r.text);
  c.evidence.push_back(absl::StrCat(
      "Windows Firewall: ", distinct.size(),
      " enabled inbound rules on TCP ports in the active profiles"));
  t->tools["netsh"]["rules"] = distinct.size();
  t->rules = *std::move(rules);
}

// The tool the fix commands use: the one that manages the rules here.
std::string FixTool(const ToolsRead& t) {
  if (t.firewalld_running) return "firewalld";
  if (t.ufw_active) return "ufw";
  if (!t.rules.nft_input_chain.empty()) return "nft";
  if (std::find(t.present.begin(), t.present.end(), "iptables") !=
      t.present.end()) {
    return "iptables";
  }
  return "";
}

// What the rules make of each port asked about.
struct PortVerdicts {
  std::vector<PortRange> blocked;
  std::vector<std::string> maybe;  // why each "maybe" (distinct)
  std::map<std::string, std::vector<PortRange>> blocked_by;
  nlohmann::json decisions = nlohmann::json::array();
};

// Appends port `p` to `ranges`, extending the last range when adjacent.
void AppendPort(std::vector<PortRange>* ranges, int p) {
  if (ranges->empty() || ranges->back().last != p - 1) {
    ranges->push_back({p, p});
  } else {
    ranges->back().last = p;
  }
}

// The rule over the ports: each (at most kMaxPortsChecked) decided against
// the rules read, and against firewalld's zone when firewalld runs.
PortVerdicts DecidePorts(const std::vector<PortRange>& ports,
                         const ToolsRead& t) {
  PortVerdicts v;
  int total = 0;
  for (const PortRange& r : ports) {
    for (int p = r.first; p <= r.last && total < kMaxPortsChecked;
         ++p, ++total) {
      PortDecision d = DecidePort(t.rules, p);
      if (t.firewalld_running && d.kind == PortDecision::kAllowed) {
        bool open = false;
        for (const PortRange& o : t.firewalld_open)
          open = open || o.Contains(p);
        if (!open) {
          d.kind = PortDecision::kMaybe;
          d.by =
              "firewalld's default zone does not list the port (a service it "
              "lists may cover it)";
        }
      }
      if (d.kind == PortDecision::kAllowed) continue;
      v.decisions.push_back(
          {{"port", p},
           {"decision", d.kind == PortDecision::kBlocked ? "blocked" : "maybe"},
           {"by", d.by}});
      if (d.kind == PortDecision::kBlocked) {
        AppendPort(&v.blocked, p);
        AppendPort(&v.blocked_by[d.by], p);
      } else if (std::find(v.maybe.begin(), v.maybe.end(), d.by) ==
                 v.maybe.end()) {
        v.maybe.push_back(d.by);
      }
    }
  }
  return v;
}

// The rule over the ephemeral ports, where Gloo and NCCL listen: whether the
// rules block the middle of the range (with the evidence when they do).
bool EphemeralBlocked(const FirewallFacts& facts, const ToolsRead& t,
                      Check* c) {
  const std::vector<PortRange> eph = {facts.ephemeral};
  const int mid = (eph[0].first + eph[0].last) / 2;
  PortDecision de = DecidePort(t.rules, mid);
  if (de.kind != PortDecision::kBlocked) return false;
  c->evidence.push_back(absl::StrCat(
      "Gloo and NCCL connect ranks on ephemeral ports (", PortRangesText(eph),
      facts.windows ? ", the dynamic port range), and "
                    : ", net.ipv4.ip_local_port_range), and ",
      de.by, " blocks them: collectives across nodes would hang"));
  return true;
}

// The summary of a check that warns: what could not be read, else what may
// block, else the ephemeral ports.
std::string WarningSummary(const FirewallFacts& facts, const ToolsRead& t,
                           const PortVerdicts& v) {
  if (!t.unreadable.empty() && facts.windows) {
    return absl::StrCat("could not read the firewall: ", t.unreadable.front());
  }
  if (!t.unreadable.empty()) {
    return absl::StrCat("could not read the rules of ",
                        absl::StrJoin(t.unreadable, ", "),
                        facts.root ? "" : " (run as root)");
  }
  if (!v.maybe.empty()) {
    return absl::StrCat("rules may block some peers: ", v.maybe.front());
  }
  return "the ports are open but ephemeral ports (Gloo/NCCL data) are blocked";
}

// The fix for blocked ephemeral ports: all TCP between the nodes.
void AllowClusterFix(bool os_windows, Check* c) {
  c->fix.push_back(
      "Allow all TCP between the nodes (e.g. from their subnet), not only "
      "the muster ports:");
  if (os_windows) {
    c->commands.push_back(
        "New-NetFirewallRule -DisplayName \"muster cluster\" -Direction "
        "Inbound -Protocol TCP -RemoteAddress 10.0.0.0/24 -Action Allow   # "
        "your nodes' subnet");
  } else {
    c->commands.push_back(
        "iptables -I INPUT -p tcp -s 10.0.0.0/24 -j ACCEPT   # your nodes' "
        "subnet");
  }
}

}  // namespace

Check FirewallCheck(const std::vector<PortRange>& ports,
                    const FirewallFacts& facts, const std::string& os,
                    bool multi_node) {
  Check c;
  c.id = "firewall";
  c.title = absl::StrCat("firewall, TCP ", PortRangesText(ports));
  ToolsRead t;
  if (facts.windows) {
    ReadWindowsFirewall(facts, &c, &t);
  } else {
    ReadLinuxTools(ports, facts, &c, &t);
  }
  c.data["tools"] = t.tools;
  const bool os_windows = os == "windows";
  const std::string tool = os_windows ? "" : FixTool(t);

  const PortVerdicts v = DecidePorts(ports, t);
  c.data["decisions"] = v.decisions;
  for (const auto& [by, rs] : v.blocked_by) {
    c.evidence.push_back(
        absl::StrCat("blocks TCP ", PortRangesText(rs), ": ", by));
  }
  for (const std::string& m : v.maybe) {
    c.evidence.push_back(absl::StrCat("may block: ", m));
  }
  const bool eph_blocked = EphemeralBlocked(facts, t, &c);
  const std::string where = os_windows
                                ? "on each Windows node, in an elevated prompt:"
                                : "as root on this host:";
  const std::string& chain = t.rules.nft_input_chain;
  if (!v.blocked.empty()) {
    c.status = Status::kFail;
    c.summary = absl::StrCat("this host's firewall blocks inbound TCP ",
                             PortRangesText(v.blocked));
    c.fix.push_back(absl::StrCat("Allow the ports in, ", where));
    c.commands = OpenPortCommands(os, tool, v.blocked, chain);
  } else if (!v.maybe.empty() || eph_blocked || !t.unreadable.empty()) {
    c.status = Status::kWarn;
    c.summary = WarningSummary(facts, t, v);
    c.fix.push_back(absl::StrCat("To allow the ports explicitly, ", where));
    c.commands = OpenPortCommands(os, tool, ports, chain);
  } else {
    c.status = Status::kPass;
    c.summary =
        t.present.empty() && !t.firewalld_running && !t.ufw_active
            ? "no firewall tool found here; nothing local filters the ports"
            : absl::StrCat("no local rule blocks inbound TCP ",
                           PortRangesText(ports));
    c.fix.push_back(absl::StrCat(
        "If peers still see the ports filtered, the block is elsewhere (the "
        "peer's own firewall, a cloud security group). To allow them "
        "explicitly, ",
        where));
    c.commands = OpenPortCommands(os, tool, ports, chain);
  }
  if (eph_blocked) AllowClusterFix(os_windows, &c);
  if (multi_node && c.status == Status::kWarn && eph_blocked) {
    c.status = Status::kFail;
  }
  return c;
}

}  // namespace muster::doctor
