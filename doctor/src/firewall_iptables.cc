// `iptables -S` into rules.
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

using internal::IsLoopbackNet;
using internal::Lower;
using internal::Tokenize;

namespace {

bool NeutralIptablesModule(absl::string_view m) {
  return m == "tcp" || m == "udp" || m == "multiport" || m == "comment" ||
         m == "conntrack" || m == "state" || m == "addrtype" || m == "icmp" ||
         m == "icmp6";
}

bool NonTerminatingTarget(absl::string_view t) {
  static const char* const kTargets[] = {
      "LOG",         "NFLOG",     "ULOG",     "MARK",    "CONNMARK", "CT",
      "TRACE",       "AUDIT",     "TCPMSS",   "DSCP",    "TOS",      "SET",
      "NOTRACK",     "CLASSIFY",  "CHECKSUM", "NFQUEUE", "TEE",      "SECMARK",
      "CONNSECMARK", "IDLETIMER", "LED",      "RATEEST", "HMARK"};
  for (const char* k : kTargets) {
    if (t == k) return true;
  }
  return false;
}

void ParseIptablesRule(const std::vector<std::string>& tok, size_t start,
                       FirewallRule* r) {
  bool negate = false;
  for (size_t i = start; i < tok.size(); ++i) {
    const std::string& t = tok[i];
    const bool has_val = i + 1 < tok.size();
    const std::string val = has_val ? tok[i + 1] : "";
    if (t == "!") {
      negate = true;
      continue;
    }
    if (t == "-p" || t == "--protocol") {
      const std::string p = Lower(val);
      const bool tcp = p == "tcp" || p == "6" || p == "all" || p == "0";
      if (negate ? (p == "tcp" || p == "6") : !tcp) r->applies_to_tcp = false;
      if (negate && !(p == "tcp" || p == "6")) r->conditional = true;
      ++i;
    } else if (t == "-s" || t == "--source" || t == "-d" ||
               t == "--destination") {
      if (val != "0.0.0.0/0" && val != "::/0") {
        if (!negate && (t == "-s" || t == "--source") && IsLoopbackNet(val)) {
          r->not_for_peers = true;  // loopback only: never a peer
        } else {
          r->conditional = true;
        }
      }
      ++i;
    } else if (t == "-i" || t == "--in-interface") {
      if (!negate && val == "lo") {
        r->not_for_peers = true;  // loopback only: never a peer
      } else {
        r->conditional = true;
      }
      ++i;
    } else if (t == "-o" || t == "--out-interface") {
      r->conditional = true;
      ++i;
    } else if (t == "--dport" || t == "--destination-port" || t == "--dports" ||
               t == "--destination-ports") {
      for (absl::string_view item :
           absl::StrSplit(val, ',', absl::SkipEmpty())) {
        PortRange pr;
        if (ParseOnePortRange(item, &pr)) {
          r->dports.push_back(pr);
        } else {
          r->dports_unknown = true;
        }
      }
      r->dports_negated = negate;
      ++i;
    } else if (t == "--sport" || t == "--source-port" || t == "--sports" ||
               t == "--source-ports") {
      r->conditional = true;
      ++i;
    } else if (t == "-m" || t == "--match") {
      if (!NeutralIptablesModule(val)) r->conditional = true;
      ++i;
    } else if (t == "--state" || t == "--ctstate") {
      bool new_conn = false;
      for (absl::string_view s : absl::StrSplit(val, ',')) {
        if (s == "NEW" || s == "UNTRACKED") new_conn = true;
      }
      if (negate) new_conn = !new_conn;
      if (!new_conn) r->not_for_peers = true;
      ++i;
    } else if (t == "-j" || t == "--jump" || t == "-g" || t == "--goto") {
      if (val == "ACCEPT") {
        r->verdict = RuleVerdict::kAccept;
      } else if (val == "DROP") {
        r->verdict = RuleVerdict::kDrop;
      } else if (val == "REJECT") {
        r->verdict = RuleVerdict::kReject;
      } else if (val == "RETURN") {
        r->verdict = RuleVerdict::kReturn;
      } else if (NonTerminatingTarget(val)) {
        r->verdict = RuleVerdict::kNone;
      } else {
        r->verdict = (t == "-g" || t == "--goto") ? RuleVerdict::kGoto
                                                  : RuleVerdict::kJump;
        r->target_chain = val;
      }
      ++i;
    } else if (absl::StartsWith(t, "-")) {
      // Options we do not interpret (--comment, --reject-with, --dst-type,
      // --tcp-flags, --syn: a new connection's SYN matches them): skip their
      // values.
      while (i + 1 < tok.size() && !absl::StartsWith(tok[i + 1], "-") &&
             tok[i + 1] != "!") {
        ++i;
      }
    }
    negate = false;
  }
}

}  // namespace

FirewallRuleset ParseIptablesRules(absl::string_view text,
                                   absl::string_view source) {
  FirewallRuleset rs;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    std::vector<std::string> tok = Tokenize(line);
    if (tok.size() < 2) continue;
    if (tok[0] == "-P" && tok.size() >= 3) {
      FirewallChain c;
      c.source = std::string(source);
      c.table = "filter";
      c.name = tok[1];
      c.input_hook = tok[1] == "INPUT";
      c.policy = tok[2];
      rs.chains.push_back(c);
    } else if (tok[0] == "-N") {
      FirewallChain c;
      c.source = std::string(source);
      c.table = "filter";
      c.name = tok[1];
      rs.chains.push_back(c);
    } else if (tok[0] == "-A") {
      FirewallRule r;
      r.source = std::string(source);
      r.table = "filter";
      r.chain = tok[1];
      r.text = std::string(line);
      ParseIptablesRule(tok, 2, &r);
      rs.rules.push_back(std::move(r));
    }
  }
  return rs;
}

}  // namespace muster::doctor
