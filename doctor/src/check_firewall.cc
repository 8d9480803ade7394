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
  const FirewallRuleset& rules = t.rules;
  const std::vector<std::string>& unreadable = t.unreadable;
  const std::vector<std::string>& present = t.present;
  const bool firewalld_running = t.firewalld_running;
  const bool ufw_active = t.ufw_active;
  const std::vector<PortRange>& firewalld_open = t.firewalld_open;
  const nlohmann::json& tools = t.tools;
  std::string tool;  // what the fix commands use
  c.data["tools"] = tools;
  if (firewalld_running) {
    tool = "firewalld";
  } else if (ufw_active) {
    tool = "ufw";
  } else if (!rules.nft_input_chain.empty()) {
    tool = "nft";
  } else if (std::find(present.begin(), present.end(), "iptables") !=
             present.end()) {
    tool = "iptables";
  }

  // Decide each port.
  std::vector<PortRange> blocked;
  std::vector<std::string> maybe;
  std::map<std::string, std::vector<PortRange>> blocked_by;
  nlohmann::json decisions = nlohmann::json::array();
  int total = 0;
  for (const PortRange& r : ports) {
    for (int p = r.first; p <= r.last && total < kMaxPortsChecked;
         ++p, ++total) {
      PortDecision d = DecidePort(rules, p);
      if (firewalld_running && d.kind == PortDecision::kAllowed) {
        bool open = false;
        for (const PortRange& o : firewalld_open) open = open || o.Contains(p);
        if (!open) {
          d.kind = PortDecision::kMaybe;
          d.by =
              "firewalld's default zone does not list the port (a service it "
              "lists may cover it)";
        }
      }
      if (d.kind == PortDecision::kAllowed) continue;
      decisions.push_back(
          {{"port", p},
           {"decision", d.kind == PortDecision::kBlocked ? "blocked" : "maybe"},
           {"by", d.by}});
      if (d.kind == PortDecision::kBlocked) {
        if (blocked.empty() || blocked.back().last != p - 1) {
          blocked.push_back({p, p});
        } else {
          blocked.back().last = p;
        }
        auto& v = blocked_by[d.by];
        if (v.empty() || v.back().last != p - 1) {
          v.push_back({p, p});
        } else {
          v.back().last = p;
        }
      } else if (std::find(maybe.begin(), maybe.end(), d.by) == maybe.end()) {
        maybe.push_back(d.by);
      }
    }
  }
  c.data["decisions"] = decisions;
  for (const auto& [by, rs] : blocked_by) {
    c.evidence.push_back(
        absl::StrCat("blocks TCP ", PortRangesText(rs), ": ", by));
  }
  for (const std::string& m : maybe) {
    c.evidence.push_back(absl::StrCat("may block: ", m));
  }
  // Gloo and NCCL listen on ephemeral ports.
  const std::vector<PortRange> eph = {facts.ephemeral};
  const int mid = (eph[0].first + eph[0].last) / 2;
  PortDecision de = DecidePort(rules, mid);
  bool eph_blocked = de.kind == PortDecision::kBlocked;
  if (eph_blocked) {
    c.evidence.push_back(absl::StrCat(
        "Gloo and NCCL connect ranks on ephemeral ports (", PortRangesText(eph),
        facts.windows ? ", the dynamic port range), and "
                      : ", net.ipv4.ip_local_port_range), and ",
        de.by, " blocks them: collectives across nodes would hang"));
  }
  const bool os_windows = os == "windows";
  std::string where = os_windows
                          ? "on each Windows node, in an elevated prompt:"
                          : "as root on this host:";
  if (!blocked.empty()) {
    c.status = Status::kFail;
    c.summary = absl::StrCat("this host's firewall blocks inbound TCP ",
                             PortRangesText(blocked));
    c.fix.push_back(absl::StrCat("Allow the ports in, ", where));
    c.commands = OpenPortCommands(os, os_windows ? "" : tool, blocked,
                                  rules.nft_input_chain);
  } else if (!maybe.empty() || eph_blocked || !unreadable.empty()) {
    c.status = Status::kWarn;
    if (!unreadable.empty() && facts.windows) {
      c.summary =
          absl::StrCat("could not read the firewall: ", unreadable.front());
    } else if (!unreadable.empty()) {
      c.summary = absl::StrCat("could not read the rules of ",
                               absl::StrJoin(unreadable, ", "),
                               facts.root ? "" : " (run as root)");
    } else if (!maybe.empty()) {
      c.summary = absl::StrCat("rules may block some peers: ", maybe.front());
    } else {
      c.summary = absl::StrCat(
          "the ports are open but ephemeral ports (Gloo/NCCL data) are "
          "blocked");
    }
    c.fix.push_back(absl::StrCat("To allow the ports explicitly, ", where));
    c.commands = OpenPortCommands(os, os_windows ? "" : tool, ports,
                                  rules.nft_input_chain);
  } else {
    c.status = Status::kPass;
    c.summary =
        present.empty() && !firewalld_running && !ufw_active
            ? "no firewall tool found here; nothing local filters the ports"
            : absl::StrCat("no local rule blocks inbound TCP ",
                           PortRangesText(ports));
    c.fix.push_back(absl::StrCat(
        "If peers still see the ports filtered, the block is elsewhere (the "
        "peer's own firewall, a cloud security group). To allow them "
        "explicitly, ",
        where));
    c.commands = OpenPortCommands(os, os_windows ? "" : tool, ports,
                                  rules.nft_input_chain);
  }
  if (eph_blocked) {
    c.fix.push_back(
        "Allow all TCP between the nodes (e.g. from their subnet), not only "
        "the muster ports:");
    if (os_windows) {
      c.commands.push_back(
          "New-NetFirewallRule -DisplayName \"muster cluster\" -Direction "
          "Inbound -Protocol TCP -RemoteAddress 10.0.0.0/24 -Action Allow   # "
          "your nodes' subnet");
    } else {
      c.commands.push_back(
          "iptables -I INPUT -p tcp -s 10.0.0.0/24 -j ACCEPT   # your nodes' "
          "subnet");
    }
  }
  if (multi_node && c.status == Status::kWarn && eph_blocked) {
    c.status = Status::kFail;
  }
  return c;
}

}  // namespace muster::doctor
