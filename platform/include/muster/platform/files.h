// Files with the operating system's semantics that std::filesystem lacks:
// replace-by-rename of regular files only, modification times as absl::Time,
// private temporary directories, and advisory locks.
#ifndef MUSTER_PLATFORM_FILES_H_
#define MUSTER_PLATFORM_FILES_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace muster::platform {

// What `path` is when it exists and is not a regular file: "a directory", "a
// symbolic link", "a character device", "a block device", "a FIFO", "a
// socket", "not a regular file". Empty when it is absent (or unreachable) or a
// regular file. The link itself is looked at, not its target.
std::string DescribeNonRegularFile(const std::string& path);

// Whether WriteFileAtomically flushes the file to the disk.
enum class Durability {
  // Flushed before the rename and the rename flushed too: after a crash of
  // the machine the file is the old one or the whole new one. State that must
  // outlive a reboot.
  kDurable,
  // Not flushed: readers still see the old file or the whole new one, never
  // a part, but a crash of the machine may lose the write. For files that
  // mean nothing after a reboot (a live agent's channel to its live workers):
  // a flush took 10-25 ms on this project's busy build machine.
  kVolatile,
};

// Replaces `path` with a file holding `contents` so that a reader sees the old
// file or the whole new one, never a part: a temporary file beside it (created
// exclusively, never through a link) is written, flushed to the disk and
// renamed over `path` (the rename flushed too), so that after a crash the file
// is the old one or the whole new one: the one atomic write of muster
// (kVolatile leaves the flushes out). Only where `path` is absent or a regular
// file: as root, replacing /dev/full or a FIFO someone reads from destroys it.
// `mode` is the new file's permission bits. Errors: FAILED_PRECONDITION
// "<path> is a FIFO; ..." (the fix: a path that does not exist or is a regular
// file), "<path> became ..." when it changed meanwhile; INTERNAL naming the
// temporary file and the OS's reason when it cannot be created, written or
// renamed (nothing is left behind).
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents, int mode = 0644,
                                 Durability durability = Durability::kDurable);

// The names in directory `dir`, without "." and "..", sorted; empty when it
// cannot be read. Portable (std::filesystem).
std::vector<std::string> ListDirectory(const std::string& dir);

// When `path` was last modified; nullopt when it does not exist.
std::optional<absl::Time> ModificationTime(const std::string& path);

// Creates a new private directory (mode 0700) named `prefix` plus a random
// suffix in `parent` (empty: the system's temporary directory) and returns its
// path. Errors: INTERNAL "cannot create <parent>/<prefix>XXXXXX: <the OS's
// reason>".
absl::StatusOr<std::string> MakeTempDirectory(const std::string& prefix,
                                              const std::string& parent = "");

// Creates directory `path` (and its missing parents) private to this user:
// mode 0700 on POSIX (the parents get the usual 0777 & ~umask), the inherited
// ACL on Windows. An existing directory is made 0700. Errors: INTERNAL "cannot
// create <path>: <the OS's reason>".
absl::Status MakePrivateDirectory(const std::string& path);

// An exclusive advisory lock on a file, held until destroyed (or the process
// ends, however). Not reentrant within a process.
class FileLock {
 public:
  // Creates `path` if needed and locks it without waiting. Errors:
  // UNAVAILABLE when another holder has it; INTERNAL when the file cannot be
  // opened (with the reason).
  static absl::StatusOr<std::unique_ptr<FileLock>> TryLock(
      const std::string& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  explicit FileLock(int handle) : handle_(handle) {}
  int handle_;
};

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_FILES_H_
