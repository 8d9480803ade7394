// Windows Firewall from `netsh advfirewall` (English output) into the
// ruleset DecidePort reads. netsh prints in the system's display language;
// a localized listing (German "Regelname:", ...) is not parsed: it is
// reported as unknown rather than guessed at.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "doctor/src/util.h"
#include "muster/doctor/firewall.h"

namespace muster::doctor {
namespace {

using internal::FirstLine;
using internal::Lower;

std::vector<absl::string_view> Lines(absl::string_view text) {
  std::vector<absl::string_view> out;
  for (absl::string_view l : absl::StrSplit(text, '\n')) {
    out.push_back(absl::StripAsciiWhitespace(l));  // and the \r
  }
  return out;
}

// Why netsh's output cannot be read: nothing printed, or not English.
absl::Status Unreadable(absl::string_view command, absl::string_view text,
                        absl::string_view expected) {
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(command,
                     " printed nothing (wine's netsh does so: it has no "
                     "advfirewall)"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat(command, " printed no '", expected,
                   "' (netsh in another language? "
                   "only its English output is read): '",
                   FirstLine(text), "'"));
}

// "Key:   value" (rules) or "Key     value" (profiles): the key is the text
// before the first ':' or run of two spaces.
std::pair<std::string, std::string> KeyValue(absl::string_view line) {
  size_t colon = line.find(':');
  size_t spaces = line.find("  ");
  size_t cut = std::min(colon, spaces);
  if (cut == absl::string_view::npos) return {std::string(line), ""};
  absl::string_view key = absl::StripAsciiWhitespace(line.substr(0, cut));
  // "Start Port      : 49152": spaces, then the colon.
  absl::string_view value = absl::StripLeadingAsciiWhitespace(line.substr(cut));
  absl::ConsumePrefix(&value, ":");
  return {Lower(key), std::string(absl::StripAsciiWhitespace(value))};
}

bool IsAny(absl::string_view v) { return v.empty() || Lower(v) == "any"; }

struct NetshRule {
  std::map<std::string, std::string> fields;  // lower-case keys
  std::string Get(const std::string& key) const {
    auto it = fields.find(key);
    return it == fields.end() ? "" : it->second;
  }
};

std::vector<NetshRule> SplitRules(const std::vector<absl::string_view>& lines) {
  std::vector<NetshRule> rules;
  for (absl::string_view l : lines) {
    if (l.empty() || absl::StartsWith(l, "---")) continue;
    auto [key, value] = KeyValue(l);
    if (key == "rule name") rules.emplace_back();
    if (rules.empty() || key.empty()) continue;
    rules.back().fields.emplace(key, value);
  }
  return rules;
}

// "29400", "80,443", "1000-2000": the ranges; false for a keyword (RPC,
// RPC-EPMap, IPHTTPS, Teredo, PlayToDiscovery, ...).
bool NumericPorts(absl::string_view v, std::vector<PortRange>* out) {
  for (absl::string_view item : absl::StrSplit(v, ',', absl::SkipEmpty())) {
    PortRange r;
    if (!ParseOnePortRange(absl::StripAsciiWhitespace(item), &r)) return false;
    out->push_back(r);
  }
  return !out->empty();
}

// The rule as DecidePort needs it; nullopt when it never applies to an
// inbound TCP connection to one of muster's ports.
std::optional<FirewallRule> ToRule(const NetshRule& n) {
  if (Lower(n.Get("enabled")) != "yes") return std::nullopt;
  const std::string dir = Lower(n.Get("direction"));
  if (!dir.empty() && dir != "in") return std::nullopt;
  const std::string proto = Lower(n.Get("protocol"));
  if (!(proto == "tcp" || proto == "6" || IsAny(proto))) return std::nullopt;
  FirewallRule r;
  r.source = "netsh";
  const std::string action = Lower(n.Get("action"));
  if (action == "block") {
    r.verdict = RuleVerdict::kDrop;
  } else if (action == "allow" || action == "bypass") {
    r.verdict = RuleVerdict::kAccept;
    r.conditional = action == "bypass";  // only for IPsec-authenticated peers
  } else {
    return std::nullopt;
  }
  const std::string port = n.Get("localport");
  if (!IsAny(port) && !NumericPorts(port, &r.dports)) return std::nullopt;
  std::vector<std::string> limits;
  for (const char* key : {"program", "service", "remoteip", "localip",
                          "interfacetypes", "remoteport"}) {
    const std::string v = n.Get(key);
    if (!IsAny(v)) limits.push_back(absl::StrCat(key, " ", v));
  }
  const std::string security = Lower(n.Get("security"));
  if (!security.empty() && security != "notrequired") {
    limits.push_back(absl::StrCat("security ", n.Get("security")));
  }
  r.conditional = r.conditional || !limits.empty();
  r.text = absl::StrCat(
      "Windows Firewall rule \"", n.Get("rule name"), "\" (", n.Get("action"),
      IsAny(proto) ? " any protocol" : " TCP", " ",
      IsAny(port) ? "any port" : absl::StrCat("port ", port),
      limits.empty() ? "" : absl::StrCat(", ", absl::StrJoin(limits, ", ")),
      ")");
  return r;
}

// "Domain,Private,Public" (or "Any") names `profile`.
bool InProfile(const NetshRule& n, const std::string& profile) {
  const std::string v = n.Get("profiles");
  if (IsAny(v)) return true;
  for (absl::string_view p : absl::StrSplit(v, ',')) {
    if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(p), profile)) {
      return true;
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<std::vector<NetshProfile>> ParseNetshProfiles(
    absl::string_view text) {
  std::vector<NetshProfile> out;
  for (absl::string_view l : Lines(text)) {
    absl::string_view name = l;
    if (absl::ConsumeSuffix(&name, "Profile Settings:")) {
      out.push_back({std::string(absl::StripAsciiWhitespace(name)), false, ""});
      continue;
    }
    if (out.empty()) continue;
    auto [key, value] = KeyValue(l);
    if (key == "state") out.back().on = Lower(value) == "on";
    if (key == "firewall policy") {
      out.back().inbound = std::string(value.substr(0, value.find(',')));
    }
  }
  if (out.empty()) {
    return Unreadable("netsh advfirewall show currentprofile", text,
                      "Profile Settings:");
  }
  return out;
}

absl::StatusOr<FirewallRuleset> ParseNetshRules(
    absl::string_view text, const std::vector<NetshProfile>& profiles) {
  const std::vector<absl::string_view> lines = Lines(text);
  std::vector<NetshRule> listed = SplitRules(lines);
  if (listed.empty() &&
      !absl::StrContains(text, "No rules match the specified criteria")) {
    return Unreadable("netsh advfirewall firewall show rule", text,
                      "Rule Name:");
  }
  // Block rules first: Windows applies them before any allow rule.
  std::vector<std::pair<const NetshRule*, FirewallRule>> rules;
  for (const NetshRule& n : listed) {
    if (auto r = ToRule(n)) rules.emplace_back(&n, *r);
  }
  std::stable_sort(rules.begin(), rules.end(),
                   [](const auto& a, const auto& b) {
                     return a.second.verdict == RuleVerdict::kDrop &&
                            b.second.verdict != RuleVerdict::kDrop;
                   });
  FirewallRuleset out;
  for (const NetshProfile& p : profiles) {
    const bool block = absl::StartsWith(p.inbound, "BlockInbound");
    out.chains.push_back(
        {"netsh", "", p.name, true, p.on && block ? "DROP" : "ACCEPT"});
    if (!p.on) continue;
    const bool always = p.inbound == "BlockInboundAlways";
    for (const auto& [n, r] : rules) {
      if (!InProfile(*n, p.name)) continue;
      if (always && r.verdict == RuleVerdict::kAccept) continue;
      out.rules.push_back(r);
      out.rules.back().chain = p.name;
    }
  }
  return out;
}

std::optional<PortRange> ParseNetshDynamicPorts(absl::string_view text) {
  int start = 0, count = 0;
  for (absl::string_view l : Lines(text)) {
    auto [key, value] = KeyValue(l);
    if (key == "start port") (void)absl::SimpleAtoi(value, &start);
    if (key == "number of ports") (void)absl::SimpleAtoi(value, &count);
  }
  if (start < 1 || count < 1 || start + count - 1 > 65535) return std::nullopt;
  return PortRange{start, start + count - 1};
}

}  // namespace muster::doctor
