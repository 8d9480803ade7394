#include "muster/common/ids.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace muster {

bool IsValidId(absl::string_view id) {
  if (id.empty() || id.size() > kMaxIdLength) return false;
  for (char c : id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
        c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

absl::Status ValidateId(absl::string_view what, absl::string_view id,
                        absl::string_view fix) {
  if (IsValidId(id)) return absl::OkStatus();
  constexpr size_t kShown = 64;  // a 1 MB id must not make a 1 MB message
  std::string shown =
      id.empty() ? "is empty"
                 : absl::StrCat("'", absl::CHexEscape(id.substr(0, kShown)),
                                id.size() > kShown ? "...' (" : "' (",
                                id.size(), " bytes) is not a valid id");
  return absl::InvalidArgumentError(absl::StrCat(what, " ", shown,
                                                 ": expected ", kIdGrammar,
                                                 fix.empty() ? "" : "; ", fix));
}

std::string NodeIdOf(absl::string_view hostname, absl::string_view unique) {
  const size_t room = kMaxIdLength - 1 - unique.size();
  std::string id;
  for (char c : hostname.substr(0, room)) {
    id.push_back(IsValidId(absl::string_view(&c, 1)) ? c : '-');
  }
  if (id.empty()) id = "node";
  return absl::StrCat(id, "-", unique);
}

}  // namespace muster
