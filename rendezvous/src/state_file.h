// Files of musterd --state-dir: a directory of regular files only, each
// replaced atomically (a temporary file, fsync, rename, fsync of the
// directory), so a kill -9 at any moment leaves the old file or the new one.
// Nothing here follows a symbolic link or writes over a device or a FIFO.
// posix/state_file.cc; windows/state_file_windows.cc (no modes there: the
// directory's inherited ACL applies, and no directory fsync).
#ifndef MUSTER_RENDEZVOUS_SRC_STATE_FILE_H_
#define MUSTER_RENDEZVOUS_SRC_STATE_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace muster::rendezvous {

// Makes DIR (mode 0700) when absent. Errors: INVALID_ARGUMENT naming DIR and
// the fix when it is not a directory (or a symbolic link), or cannot be made
// or written.
absl::Status PrepareStateDir(const std::string& dir);

// DIR/NAME's contents. NOT_FOUND when absent; INVALID_ARGUMENT when it is not
// a regular file; UNAVAILABLE when it cannot be read.
absl::StatusOr<std::string> ReadStateFile(const std::string& dir,
                                          const std::string& name);

// Replaces DIR/NAME with contents atomically (mode 0600). Errors:
// INVALID_ARGUMENT when DIR/NAME exists and is not a regular file (it is left
// alone); UNAVAILABLE naming the step that failed.
absl::Status WriteStateFile(const std::string& dir, const std::string& name,
                            const std::string& contents);

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_STATE_FILE_H_
