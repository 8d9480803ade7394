// Port ranges: parsing, text, merging.
#include "muster/doctor/ports.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "muster/platform/net.h"

namespace muster::doctor {

absl::StatusOr<std::vector<PortRange>> ParsePortRanges(absl::string_view text) {
  std::vector<PortRange> out;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("ports '", text, "': ", why,
                     "; write PORT, FIRST-LAST or a comma list of those"));
  };
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    item = absl::StripAsciiWhitespace(item);
    size_t sep = item.find_first_of("-:");
    PortRange r;
    absl::string_view a = item.substr(0, sep);
    absl::string_view b =
        sep == absl::string_view::npos ? a : item.substr(sep + 1);
    if (!absl::SimpleAtoi(a, &r.first) || !absl::SimpleAtoi(b, &r.last)) {
      return bad(absl::StrCat("'", item, "' is not a port or a range"));
    }
    if (r.first < 1 || r.last > 65535 || r.first > 65535 || r.last < 1) {
      return bad(absl::StrCat("'", item, "' is outside 1..65535"));
    }
    if (r.first > r.last) {
      return bad(absl::StrCat("'", item, "' goes backwards"));
    }
    out.push_back(r);
  }
  if (out.empty()) return bad("no port given");
  return out;
}

std::string PortRangesText(const std::vector<PortRange>& ranges,
                           absl::string_view range_sep) {
  std::vector<std::string> parts;
  for (const PortRange& r : ranges) {
    parts.push_back(r.first == r.last
                        ? absl::StrCat(r.first)
                        : absl::StrCat(r.first, range_sep, r.last));
  }
  return absl::StrJoin(parts, ",");
}

std::vector<PortRange> NormalizePortRanges(std::vector<PortRange> v) {
  std::sort(v.begin(), v.end(), [](const PortRange& a, const PortRange& b) {
    return a.first < b.first;
  });
  std::vector<PortRange> out;
  for (const PortRange& r : v) {
    if (!out.empty() && r.first <= out.back().last + 1) {
      out.back().last = std::max(out.back().last, r.last);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

// "5000", "5000:5010" (iptables) or "5000-5010" (nft).
bool ParseOnePortRange(absl::string_view s, PortRange* r) {
  size_t sep = s.find_first_of(":-");
  absl::string_view a = s.substr(0, sep);
  absl::string_view b = sep == absl::string_view::npos ? a : s.substr(sep + 1);
  if (!absl::SimpleAtoi(a, &r->first) || !absl::SimpleAtoi(b, &r->last)) {
    // A service name ("ssh") as iptables -S never prints but nft may.
    const std::optional<int> port = platform::TcpServicePort(a);
    if (!port.has_value() || sep != absl::string_view::npos) return false;
    r->first = r->last = *port;
  }
  return r->first <= r->last;
}

}  // namespace muster::doctor
