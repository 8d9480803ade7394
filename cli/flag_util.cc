#include "cli/flag_util.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace muster::cli {

absl::Status BadValue(const Given& g, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(g.source, "=", g.value, ": ", why));
}

std::optional<bool> ParseBool(absl::string_view text) {
  std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
  // "-1" is how CLI11 spells a flag given as --flag=false.
  if (t == "0" || t == "false" || t == "no" || t == "off" || t == "-1")
    return false;
  return std::nullopt;
}

std::optional<int> ParseInt(absl::string_view text) {
  int v = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &v))
    return std::nullopt;
  return v;
}

int EditDistance(absl::string_view a, absl::string_view b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] =
          std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

}  // namespace muster::cli
