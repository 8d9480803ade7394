// ListDirectory (files.h): portable, through std::filesystem; and the check
// that both OSes' WriteFileAtomically make first (replaceable.h).
#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "muster/platform/files.h"
#include "platform/src/replaceable.h"

namespace muster::platform {

std::vector<std::string> ListDirectory(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

namespace internal {

absl::Status CheckReplaceable(const std::string& path) {
  const std::string what = DescribeNonRegularFile(path);
  if (what.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(path, " is ", what,
                   "; it is replaced by a new file, so give a path that does "
                   "not exist or is a regular file"));
}

}  // namespace internal

}  // namespace muster::platform
