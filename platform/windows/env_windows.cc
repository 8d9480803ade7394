// Environment on Windows (issue: Windows). See README.md.
#include <cstdio>
#include <cstdlib>

#include "muster/platform/env.h"

namespace muster::platform {

std::optional<std::string> GetEnv(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}
std::map<std::string, std::string> CurrentEnvironment() { return {}; }
absl::StatusOr<std::string> FindExecutable(const std::string& argv0,
                                           const std::string&) {
  return absl::UnimplementedError("PATH lookup of '" + argv0 +
                                  "' is not implemented on Windows");
}
int ProcessId() { return 0; }
std::vector<int> CurrentCpuAffinity() { return {}; }
void WriteToStderr(absl::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stderr);
}
void IgnoreBrokenPipes() {}

}  // namespace muster::platform
