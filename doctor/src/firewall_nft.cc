// `nft list ruleset` into rules.
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
using internal::Tokenize;

namespace {

// Reads an nft value at tok[*i]: a word, or "{ a , b-c }". Advances *i to its
// last token.
std::vector<std::string> NftValue(const std::vector<std::string>& tok,
                                  size_t* i) {
  std::vector<std::string> out;
  if (*i >= tok.size()) return out;
  if (tok[*i] != "{") {
    out.push_back(tok[*i]);
    return out;
  }
  while (++*i < tok.size() && tok[*i] != "}") {
    if (tok[*i] != ",") out.push_back(tok[*i]);
  }
  return out;
}

// Words that do not limit which packets a rule matches.
// clang-format off
const std::set<std::string>& NeutralWords() {
  static const auto* const kNeutral = new std::set<std::string>{
      "counter", "packets", "bytes", "meta", "nfproto", "ipv4", "ipv6", "inet", "ip", "ip6",
      "log", "prefix", "level", "flags", "comment", "l4proto", "protocol", "nexthdr", "ct",
      "tcp", "th", "notrack", "continue", "queue", "with", "icmp", "icmpx", "icmpv6", "type",
      "admin-prohibited", "port-unreachable", "host-unreachable", "net-unreachable",
      "host-prohibited", "net-prohibited", "reset", "prot-unreachable", "no-route",
      "addr-unreachable"};
  return *kNeutral;
}
// clang-format on

// Skips a "!=" at tok[*i]; whether there was one.
bool SkipNegation(const std::vector<std::string>& tok, size_t* i) {
  if (*i < tok.size() && tok[*i] == "!=") {
    ++*i;
    return true;
  }
  return false;
}

// "tcp dport [!=] VALUE" from tok[*i] = "tcp".
void ParseDport(const std::vector<std::string>& tok, size_t* i,
                FirewallRule* r) {
  *i += 2;
  const bool negated = SkipNegation(tok, i);
  for (const std::string& v : NftValue(tok, i)) {
    PortRange pr;
    if (absl::StartsWith(v, "@")) {
      r->dports_unknown = true;  // until the set is looked up
      r->dports_set = v;
    } else if (!ParseOnePortRange(v, &pr)) {
      r->dports_unknown = true;
    } else {
      r->dports.push_back(pr);
    }
  }
  r->dports_negated = negated;
}

// "l4proto|ip protocol|nexthdr [!=] VALUE": a rule for protocols other than
// TCP does not apply.
void ParseProtocol(const std::vector<std::string>& tok, size_t* i,
                   FirewallRule* r) {
  ++*i;
  const bool negated = SkipNegation(tok, i);
  bool tcp = false;
  for (const std::string& v : NftValue(tok, i)) {
    if (v == "tcp" || v == "6") tcp = true;
  }
  if (negated) tcp = !tcp;
  if (!tcp) r->applies_to_tcp = false;
}

// "ct state|status [!=] VALUE": a rule only for established connections is
// not for a peer's new one.
void ParseConntrack(const std::vector<std::string>& tok, size_t* i,
                    FirewallRule* r) {
  const bool is_state = tok[*i + 1] == "state";
  *i += 2;
  const bool negated = SkipNegation(tok, i);
  std::vector<std::string> states;
  for (const std::string& v : NftValue(tok, i)) {
    for (absl::string_view s : absl::StrSplit(v, ',', absl::SkipEmpty())) {
      states.emplace_back(s);
    }
  }
  if (!is_state) {
    r->conditional = true;
    return;
  }
  bool new_conn = false;
  for (const auto& s : states) new_conn = new_conn || s == "new";
  if (negated) new_conn = !new_conn;
  if (!new_conn) r->not_for_peers = true;
}

// "iif|iifname [!=] VALUE" (skip = 1) or "ip|ip6 saddr|daddr [!=] VALUE"
// (skip = 2): loopback only is never a peer; anything else limits the match.
void ParseOrigin(const std::vector<std::string>& tok, size_t* i, size_t skip,
                 FirewallRule* r) {
  const bool address = skip == 2;
  const bool saddr = address && tok[*i + 1] == "saddr";
  *i += skip;
  const bool negated = SkipNegation(tok, i);
  std::vector<std::string> v = NftValue(tok, i);
  const bool loopback = !negated && v.size() == 1 &&
                        (address ? saddr && IsLoopbackNet(v[0]) : v[0] == "lo");
  if (loopback) {
    r->not_for_peers = true;
  } else {
    r->conditional = true;
  }
}

// Whether tok[i] is a verdict; sets it (and a jump's target) when it is.
bool ParseVerdict(const std::vector<std::string>& tok, size_t i,
                  FirewallRule* r) {
  const std::string& t = tok[i];
  if (t == "accept" || t == "drop" || t == "reject" || t == "return") {
    r->verdict = t == "accept"   ? RuleVerdict::kAccept
                 : t == "drop"   ? RuleVerdict::kDrop
                 : t == "reject" ? RuleVerdict::kReject
                                 : RuleVerdict::kReturn;
    return true;
  }
  if (t == "jump" || t == "goto") {
    r->verdict = t == "jump" ? RuleVerdict::kJump : RuleVerdict::kGoto;
    r->target_chain = i + 1 < tok.size() ? tok[i + 1] : "";
    return true;
  }
  return false;
}

void ParseNftRule(const std::vector<std::string>& tok, FirewallRule* r) {
  for (size_t i = 0; i < tok.size(); ++i) {
    const std::string& t = tok[i];
    auto next = [&](size_t k) -> std::string {
      return i + k < tok.size() ? tok[i + k] : "";
    };
    if ((t == "tcp" || t == "th") && next(1) == "dport") {
      ParseDport(tok, &i, r);
    } else if ((t == "tcp" || t == "th") && next(1) == "sport") {
      r->conditional = true;
      i += 2;
      SkipNegation(tok, &i);
      NftValue(tok, &i);
    } else if (t == "tcp" && next(1) == "flags") {
      r->conditional = true;
      ++i;
    } else if (t == "udp" || t == "sctp" || t == "dccp" || t == "udplite" ||
               ((t == "icmp" || t == "icmpv6") && next(1) == "type")) {
      if (next(1) == "dport" || next(1) == "sport" || next(1) == "type") {
        r->applies_to_tcp = false;
      }
    } else if (t == "l4proto" ||
               (t == "protocol" && i > 0 && tok[i - 1] == "ip") ||
               t == "nexthdr") {
      ParseProtocol(tok, &i, r);
    } else if (t == "ct" && (next(1) == "state" || next(1) == "status")) {
      ParseConntrack(tok, &i, r);
    } else if (t == "iif" || t == "iifname") {
      ParseOrigin(tok, &i, 1, r);
    } else if ((t == "ip" || t == "ip6") &&
               (next(1) == "saddr" || next(1) == "daddr")) {
      ParseOrigin(tok, &i, 2, r);
    } else if (ParseVerdict(tok, i, r)) {
      return;  // the verdict ends the rule ("reject with icmp type ...")
    } else if (t == "comment" || t == "prefix") {
      ++i;  // its quoted value
    } else if (absl::ascii_isdigit(static_cast<unsigned char>(t[0])) ||
               NeutralWords().count(t) > 0) {
      // Values (counter numbers) and words that do not limit the match.
    } else {
      // Anything else (oif, meta mark, limit, fib, sets, vmaps ...) may limit
      // which packets the rule matches.
      r->conditional = true;
    }
  }
}

}  // namespace

namespace {

// The ports of an nft set of services ("type inet_service; elements = { 22,
// 6000-6010 }"), or nullopt when it is some other kind of set.
std::optional<std::vector<PortRange>> NftSetPorts(const std::string& text) {
  std::vector<std::string> tok = Tokenize(text);
  bool services = false;
  std::vector<PortRange> out;
  for (size_t i = 0; i < tok.size(); ++i) {
    if ((tok[i] == "type" && i + 1 < tok.size() &&
         tok[i + 1] == "inet_service") ||
        (tok[i] == "dport" && i > 0 && tok[i - 1] != "@")) {
      services = true;
    }
    if (tok[i] == "elements") {
      for (i += 2; i < tok.size() && tok[i] != "{"; ++i) {
      }
      std::vector<std::string> values = NftValue(tok, &i);
      for (const std::string& v : values) {
        PortRange pr;
        if (!ParseOnePortRange(v, &pr)) return std::nullopt;
        out.push_back(pr);
      }
    }
  }
  if (!services) return std::nullopt;
  return out;
}

}  // namespace

FirewallRuleset ParseNftRuleset(absl::string_view text) {
  FirewallRuleset rs;
  std::set<std::string> iptables_tables;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    // "# Warning: table ip filter is managed by iptables-nft, do not touch!"
    line = absl::StripAsciiWhitespace(line);
    if (absl::StartsWith(line, "# Warning: table ") &&
        absl::StrContains(line, "iptables-nft")) {
      std::vector<std::string> tok = Tokenize(line);
      if (tok.size() >= 5) iptables_tables.insert(tok[3] + " " + tok[4]);
    }
  }
  std::string table;
  bool skip_table = false;
  FirewallChain* chain = nullptr;
  int depth = 0;
  int skip_depth = -1;  // inside a set/map/... block deeper than this
  std::string set_key;  // "inet filter @name" while reading a set
  std::string set_text;
  std::map<std::string, std::optional<std::vector<PortRange>>> sets;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || absl::StartsWith(line, "#")) continue;
    std::string spaced = absl::StrReplaceAll(
        line, {{"{", " { "}, {"}", " } "}, {",", " , "}, {";", " ; "}});
    std::vector<std::string> tok = Tokenize(spaced);
    if (tok.empty()) continue;
    const int opens =
        static_cast<int>(std::count(line.begin(), line.end(), '{'));
    const int closes =
        static_cast<int>(std::count(line.begin(), line.end(), '}'));
    if (skip_depth >= 0) {
      depth += opens - closes;
      if (!set_key.empty()) absl::StrAppend(&set_text, " ", spaced);
      if (depth <= skip_depth) {
        skip_depth = -1;
        if (!set_key.empty()) sets[set_key] = NftSetPorts(set_text);
        set_key.clear();
      }
      continue;
    }
    if (depth == 0 && tok[0] == "table" && tok.size() >= 3) {
      table = tok[1] + " " + tok[2];
      if (tok[2] == "{") table = "ip " + tok[1];  // "table NAME {" (family ip)
      skip_table =
          iptables_tables.count(table) > 0 || table == "inet firewalld";
      depth += opens - closes;
      chain = nullptr;
      continue;
    }
    if (depth == 1 && tok[0] == "chain" && tok.size() >= 2) {
      FirewallChain c;
      c.source = "nft";
      c.table = table;
      c.name = tok[1];
      rs.chains.push_back(c);
      chain = skip_table ? nullptr : &rs.chains.back();
      if (skip_table) rs.chains.pop_back();
      depth += opens - closes;
      if (depth <= 1) chain = nullptr;
      continue;
    }
    if (depth == 1 && opens > closes) {
      // set, map, flowtable, counter, quota, ct helper ... blocks; the
      // elements of a set of ports are kept for rules that name it.
      skip_depth = depth;
      if (tok[0] == "set" && tok.size() >= 2) {
        set_key = absl::StrCat(table, " @", tok[1]);
        set_text.clear();
      }
      depth += opens - closes;
      continue;
    }
    if (depth == 2 && chain != nullptr) {
      if (tok[0] == "type") {
        chain->input_hook = false;
        for (size_t i = 0; i + 1 < tok.size(); ++i) {
          if (tok[i] == "hook" && tok[i + 1] == "input" && tok[1] == "filter")
            chain->input_hook = true;
          if (tok[i] == "policy") {
            chain->policy = absl::AsciiStrToUpper(tok[i + 1]);
          }
        }
        if (chain->policy.empty()) chain->policy = "ACCEPT";
        if (chain->input_hook && rs.nft_input_chain.empty()) {
          rs.nft_input_chain = absl::StrCat(table, " ", chain->name);
        }
      } else if (tok[0] != "}" && tok[0] != "policy") {
        FirewallRule r;
        r.source = "nft";
        r.table = table;
        r.chain = chain->name;
        r.text = std::string(line);
        ParseNftRule(tok, &r);
        rs.rules.push_back(std::move(r));
      }
    }
    depth += opens - closes;
    if (depth < 2) chain = nullptr;
    if (depth <= 0) {
      depth = 0;
      table.clear();
      skip_table = false;
    }
  }
  for (FirewallRule& r : rs.rules) {
    if (r.dports_set.empty()) continue;
    auto it = sets.find(absl::StrCat(r.table, " ", r.dports_set));
    if (it == sets.end() || !it->second.has_value()) continue;
    r.dports.insert(r.dports.end(), it->second->begin(), it->second->end());
    r.dports_unknown = false;
  }
  return rs;
}

}  // namespace muster::doctor
