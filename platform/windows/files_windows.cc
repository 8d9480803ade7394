// Files on Windows (issue: Windows). See README.md.
#include "muster/platform/files.h"

namespace muster::platform {

std::string DescribeNonRegularFile(const std::string&) { return ""; }
absl::Status WriteFileAtomically(const std::string& path, absl::string_view,
                                 int) {
  return absl::UnimplementedError("cannot write " + path +
                                  ": not implemented on Windows");
}
std::optional<absl::Time> ModificationTime(const std::string&) {
  return std::nullopt;
}
absl::StatusOr<std::string> MakeTempDirectory(const std::string&,
                                              const std::string&) {
  return absl::UnimplementedError("not implemented on Windows");
}
absl::StatusOr<std::unique_ptr<FileLock>> FileLock::TryLock(
    const std::string&) {
  return absl::UnimplementedError("not implemented on Windows");
}
FileLock::~FileLock() = default;

}  // namespace muster::platform
