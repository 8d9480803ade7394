// What the rules do to a port, and the commands that open ports.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "doctor/src/util.h"
#include "muster/doctor/firewall.h"

namespace muster::doctor {

namespace {

struct Eval {
  enum Kind { kNone, kAccepted, kBlocked, kReturned } kind = kNone;
  std::string by;
  std::vector<std::string> maybe_blocked_by;
  std::vector<std::string> maybe_accepted_by;
};

std::string RuleLabel(const FirewallRule& r) {
  if (r.source == "netsh") return r.text;  // names the rule already
  if (r.source == "nft") {
    return absl::StrCat("nft ", r.table, " chain ", r.chain, ": ", r.text);
  }
  return absl::StrCat(r.source, ": ", r.text);
}

bool PortMatches(const FirewallRule& r, int port) {
  if (r.dports.empty()) return true;
  bool in = false;
  for (const PortRange& p : r.dports) in = in || p.Contains(port);
  return in != r.dports_negated;
}

Eval EvalChain(const FirewallRuleset& rs, const std::string& source,
               const std::string& table, const std::string& chain, int port,
               int depth) {
  Eval out;
  if (depth > 16) return out;
  for (const FirewallRule& r : rs.rules) {
    if (r.source != source || r.table != table || r.chain != chain) continue;
    if (!r.applies_to_tcp || r.not_for_peers) continue;
    if (!r.dports_unknown && !PortMatches(r, port)) continue;
    const bool conditional = r.conditional || r.dports_unknown;
    switch (r.verdict) {
      case RuleVerdict::kNone:
        break;
      case RuleVerdict::kAccept:
        if (conditional) {
          out.maybe_accepted_by.push_back(RuleLabel(r));
          break;
        }
        out.kind = Eval::kAccepted;
        out.by = RuleLabel(r);
        return out;
      case RuleVerdict::kDrop:
      case RuleVerdict::kReject:
        if (conditional) {
          out.maybe_blocked_by.push_back(RuleLabel(r));
          break;
        }
        out.kind = Eval::kBlocked;
        out.by = RuleLabel(r);
        return out;
      case RuleVerdict::kReturn:
        if (!conditional) {
          out.kind = Eval::kReturned;
          return out;
        }
        break;
      case RuleVerdict::kJump:
      case RuleVerdict::kGoto: {
        Eval sub =
            EvalChain(rs, source, table, r.target_chain, port, depth + 1);
        for (auto& m : sub.maybe_blocked_by) out.maybe_blocked_by.push_back(m);
        for (auto& m : sub.maybe_accepted_by)
          out.maybe_accepted_by.push_back(m);
        if (sub.kind == Eval::kAccepted || sub.kind == Eval::kBlocked) {
          if (conditional) {
            (sub.kind == Eval::kAccepted ? out.maybe_accepted_by
                                         : out.maybe_blocked_by)
                .push_back(sub.by);
            break;
          }
          out.kind = sub.kind;
          out.by = sub.by;
          return out;
        }
        if (r.verdict == RuleVerdict::kGoto && !conditional) {
          out.kind = Eval::kReturned;
          return out;
        }
        break;
      }
    }
  }
  return out;
}

}  // namespace

PortDecision DecidePort(const FirewallRuleset& rs, int port) {
  PortDecision d;
  std::vector<std::string> maybe;
  bool blocked = false;
  for (const FirewallChain& c : rs.chains) {
    if (!c.input_hook) continue;
    Eval e = EvalChain(rs, c.source, c.table, c.name, port, 0);
    std::string base = c.source == "nft"
                           ? absl::StrCat("nft ", c.table, " chain ", c.name)
                           : absl::StrCat(c.source, " chain ", c.name);
    std::string policy = absl::StrCat(": policy ", c.policy);
    if (c.source == "netsh") {
      base = absl::StrCat("Windows Firewall, ", c.name, " profile");
      policy = c.policy == "DROP" ? ": default inbound action Block"
                                  : ": default inbound action Allow";
    }
    bool accepted = false;
    std::string by;
    if (e.kind == Eval::kAccepted) {
      accepted = true;
      by = e.by;
    } else if (e.kind == Eval::kBlocked) {
      by = e.by;
    } else if (c.policy == "DROP" || c.policy == "REJECT") {
      by = absl::StrCat(base, policy);
    } else {
      accepted = true;
      by = absl::StrCat(base, c.policy.empty() ? ": policy ACCEPT" : policy);
    }
    if (!accepted) {
      if (!e.maybe_accepted_by.empty()) {
        maybe.push_back(absl::StrCat(by, " (unless accepted by ",
                                     e.maybe_accepted_by.front(), ")"));
      } else if (!blocked) {
        blocked = true;
        d.by = by;
      }
    } else if (!e.maybe_blocked_by.empty()) {
      maybe.push_back(
          absl::StrCat(e.maybe_blocked_by.front(), " (for some sources)"));
    } else if (d.by.empty()) {
      d.by = by;
    }
  }
  if (blocked) {
    d.kind = PortDecision::kBlocked;
  } else if (!maybe.empty()) {
    d.kind = PortDecision::kMaybe;
    d.by = maybe.front();
  } else {
    d.kind = PortDecision::kAllowed;
  }
  return d;
}

std::vector<std::string> OpenPortCommands(
    absl::string_view os, absl::string_view tool,
    const std::vector<PortRange>& ports_in, absl::string_view nft_chain) {
  std::vector<PortRange> ports = NormalizePortRanges(ports_in);
  std::vector<std::string> out;
  if (ports.empty()) return out;
  const std::string dash = PortRangesText(ports, "-");
  if (os == "windows") {
    std::vector<std::string> ps;
    for (const PortRange& r : ports) {
      ps.push_back(r.first == r.last
                       ? absl::StrCat(r.first)
                       : absl::StrCat("\"", r.first, "-", r.last, "\""));
    }
    out.push_back(absl::StrCat(
        "netsh advfirewall firewall add rule name=\"muster TCP ", dash,
        "\" dir=in action=allow protocol=TCP localport=", dash));
    out.push_back(
        absl::StrCat("New-NetFirewallRule -DisplayName \"muster TCP ", dash,
                     "\" -Direction Inbound -Protocol TCP -LocalPort ",
                     absl::StrJoin(ps, ","), " -Action Allow"));
    return out;
  }
  const bool all = tool.empty();
  auto tag = [&](const char* what) {
    return all ? absl::StrCat("   # ", what) : std::string();
  };
  if (all || tool == "iptables") {
    if (ports.size() == 1) {
      out.push_back(absl::StrCat("iptables -I INPUT -p tcp --dport ",
                                 PortRangesText(ports, ":"), " -j ACCEPT",
                                 tag("iptables")));
    } else {
      out.push_back(absl::StrCat(
          "iptables -I INPUT -p tcp -m multiport --dports ",
          PortRangesText(ports, ":"), " -j ACCEPT", tag("iptables")));
    }
  }
  if (all || tool == "nft") {
    std::string chain =
        nft_chain.empty() ? "inet filter input" : std::string(nft_chain);
    std::string set =
        ports.size() == 1
            ? dash
            : absl::StrCat("{ ", absl::StrReplaceAll(dash, {{",", ", "}}),
                           " }");
    out.push_back(absl::StrCat("nft insert rule ", chain, " tcp dport ", set,
                               " accept", tag("nftables")));
  }
  if (all || tool == "ufw") {
    for (const PortRange& r : ports) {
      out.push_back(absl::StrCat("ufw allow ",
                                 r.first == r.last
                                     ? absl::StrCat(r.first)
                                     : absl::StrCat(r.first, ":", r.last),
                                 "/tcp", tag("ufw")));
    }
  }
  if (all || tool == "firewalld") {
    std::string cmd = "firewall-cmd --permanent";
    for (const PortRange& r : ports) {
      absl::StrAppend(&cmd, " --add-port=",
                      r.first == r.last ? absl::StrCat(r.first)
                                        : absl::StrCat(r.first, "-", r.last),
                      "/tcp");
    }
    absl::StrAppend(&cmd, " && firewall-cmd --reload", tag("firewalld"));
    out.push_back(cmd);
  }
  return out;
}

}  // namespace muster::doctor
