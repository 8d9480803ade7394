// The file operations of libmuster_comm, behind a small portable interface:
// a file mapped into memory and shared with other processes (the progress
// heartbeat), and a file that processes read and rewrite whole under a lock
// (the file:// store). posix/locked_file.cc implements them with open, mmap
// and flock; windows/locked_file_windows.cc with CreateFileMapping, LockFileEx
// and the Restart Manager (to name a lock's holder).
#ifndef MUSTER_PLATFORM_LOCKED_FILE_H_
#define MUSTER_PLATFORM_LOCKED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace muster::platform {

// A file shared by processes of one machine that read and rewrite it whole,
// each under a lock. The lock belongs to this open file, is released when it
// is closed, and by the OS when the process dies (a crashed holder never
// blocks the others; its stale contents are the caller's to recognise).
// Not thread-safe: one owner.
class LockedFile {
 public:
  enum class Mode { kShared, kExclusive };

  // Opens `path` read-write, creating it (mode 0644). `what` names it in
  // errors: UNAVAILABLE "cannot open <what> <path>: <OS error>".
  static absl::StatusOr<std::unique_ptr<LockedFile>> Open(
      const std::string& path, absl::string_view what);
  ~LockedFile();  // Closes (releasing a lock it holds).
  LockedFile(const LockedFile&) = delete;
  LockedFile& operator=(const LockedFile&) = delete;

  // Blocks until this file holds the lock in `mode` (shared with other
  // shared holders, or alone). Errors: UNAVAILABLE naming the OS error.
  absl::Status Lock(Mode mode);
  // Releases the lock. Never blocks.
  void Unlock();

  // With the lock held: the whole contents, or replaces them with `text`.
  // Errors: UNAVAILABLE naming the path and the OS error.
  absl::StatusOr<std::string> ReadAll();
  absl::Status WriteAll(absl::string_view text);

  // Removes the path; this open file stays usable. Never blocks.
  void Remove();

  // The processes holding a lock on this file now ("pid 4242 (comm_worker)"),
  // for a message about a lock that is taking long. Empty when none does or
  // the OS cannot tell.
  std::vector<std::string> LockHolders() const;

  const std::string& path() const { return path_; }

 private:
  LockedFile(std::string path, intptr_t handle)
      : path_(std::move(path)), handle_(handle) {}
  const std::string path_;
  const intptr_t handle_;  // A file descriptor; a HANDLE on Windows.
};

// The path a file:// URI's address (what follows "file://") names, in this
// OS's form, or "" when it is not an absolute path: "/tmp/store" on POSIX; on
// Windows "/C:/tmp/store" (file:///C:/tmp/store, PyTorch's spelling) and
// "C:/tmp/store" both name C:/tmp/store.
std::string AbsolutePathFromUri(absl::string_view address);

// A regular file mapped read-write and shared: writes to data() reach every
// process that maps or reads the file, without a system call. Not
// thread-safe (the memory is, by design, shared).
class MappedFile {
 public:
  // Creates the file at `path` (mode 0644), or truncates an existing one,
  // writes `contents` and maps those bytes. `what` names the file in errors:
  // UNAVAILABLE "cannot create|write|map <what> <path>: <OS error>".
  static absl::StatusOr<std::unique_ptr<MappedFile>> Create(
      const std::string& path, absl::string_view contents,
      absl::string_view what);
  ~MappedFile();  // Unmaps; the file stays.
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedFile(char* data, size_t size) : data_(data), size_(size) {}
  char* const data_;
  const size_t size_;
};

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_LOCKED_FILE_H_
