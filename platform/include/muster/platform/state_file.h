// Files of musterd --state-dir: a directory of regular files only, each
// replaced atomically and durably by WriteFileAtomically (files.h: a temporary
// file, flushed, renamed over the old one, and on POSIX the directory
// fsynced), so a kill -9 at any moment leaves the old file or the new one.
// Nothing here follows a symbolic link or writes over a device or a FIFO.
// Portable (src/state_file.cc); on Windows the modes do not apply (the
// directory's inherited ACL does).
#ifndef MUSTER_PLATFORM_STATE_FILE_H_
#define MUSTER_PLATFORM_STATE_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace muster::platform {

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

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_STATE_FILE_H_
