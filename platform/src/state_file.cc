// Files of musterd --state-dir, portable: the kinds of file from
// DescribeNonRegularFile (links, reparse points, devices and directories are
// refused) and the one atomic, durable replace of WriteFileAtomically.
#include "muster/platform/state_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "muster/platform/files.h"

namespace muster::platform {

absl::Status PrepareStateDir(const std::string& dir) {
  if (dir.empty())
    return absl::InvalidArgumentError("--state-dir: the path is empty");
  namespace fs = std::filesystem;
  std::error_code ec;
  // "a directory" only for a real one: a reparse point (a symbolic link, a
  // junction) reads as "a symbolic link".
  const std::string kind = platform::DescribeNonRegularFile(dir);
  if (kind.empty() && !fs::exists(fs::u8path(dir), ec)) {
    if (!fs::create_directory(fs::u8path(dir), ec)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--state-dir=", dir, ": cannot create it: ", ec.message(),
          "; create the directory or choose another path"));
    }
    // Mode 0700 on POSIX; on Windows the directory's inherited ACL applies
    // (this only keeps it from being read-only there).
    fs::permissions(fs::u8path(dir), fs::perms::owner_all,
                    fs::perm_options::replace, ec);
  } else if (kind != "a directory") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--state-dir=", dir,
        " is not a directory (a file, device or symbolic link); give a "
        "directory that only musterd uses"));
  }
  // Writable: a probe file, made and removed.
  const std::string probe = absl::StrCat(dir, "/.musterd-write-test");
  absl::Status writable = platform::WriteFileAtomically(probe, "");
  fs::remove(fs::u8path(probe), ec);
  if (!writable.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--state-dir=", dir, ": not writable: ", writable.message(),
        "; give musterd's account write access"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadStateFile(const std::string& dir,
                                          const std::string& name) {
  const std::string path = absl::StrCat(dir, "/", name);
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(fs::u8path(path), ec))) {
    return absl::NotFoundError(path);
  }
  if (!platform::DescribeNonRegularFile(path).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is not a regular file; remove it (musterd writes it)"));
  }
  std::ifstream in(fs::u8path(path), std::ios::binary);
  if (!in) return absl::UnavailableError(absl::StrCat(path, ": cannot open"));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::UnavailableError(absl::StrCat(path, ": read"));
  return text.str();
}

absl::Status WriteStateFile(const std::string& dir, const std::string& name,
                            const std::string& contents) {
  const std::string path = absl::StrCat(dir, "/", name);
  if (!platform::DescribeNonRegularFile(path).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is not a regular file; it is left alone (remove it)"));
  }
  absl::Status written = platform::WriteFileAtomically(path, contents, 0600);
  if (!written.ok()) {
    return absl::UnavailableError(
        absl::StrCat("write ", path, ": ", written.message()));
  }
  return absl::OkStatus();
}

}  // namespace muster::platform
