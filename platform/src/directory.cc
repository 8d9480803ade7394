// ListDirectory (files.h): portable, through std::filesystem.
#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "muster/platform/files.h"

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

}  // namespace muster::platform
