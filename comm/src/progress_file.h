// The writer side of the progress heartbeat (format and mechanism:
// muster/comm/progress.h).
#ifndef MUSTER_COMM_SRC_PROGRESS_FILE_H_
#define MUSTER_COMM_SRC_PROGRESS_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "comm/src/os.h"

namespace muster::comm::internal {

// One mapped progress file. Thread-safe; the updates never block on I/O.
class ProgressFile {
 public:
  // The process-wide file at `path`, created and mapped on the first call for
  // that path; later calls return the same object (never freed). Errors:
  // UNAVAILABLE naming the path and the system error.
  static absl::StatusOr<ProgressFile*> Open(const std::string& path);

  // The file of CommOptions::progress_file, else MUSTER_PROGRESS_FILE; nullptr
  // when neither is set. A file that cannot be opened is logged once and
  // yields nullptr (progress is advisory: it never fails a communicator).
  static ProgressFile* ForOptions(const std::string& option_path);

  // Calls Report() on every file opened so far in this process, opening
  // MUSTER_PROGRESS_FILE first if none is.
  static absl::Status ReportAll();

  // An operation named `op` starts / the one in flight ends.
  void Begin(absl::string_view op);
  void End();
  // ReportProgress().
  void Report();

 private:
  ProgressFile(std::unique_ptr<MappedFile> file, std::string path);
  // Called with mu_ held.
  void WriteNumber(size_t offset, size_t width, uint64_t value);
  void WriteText(size_t offset, size_t width, absl::string_view text);
  void Touch(int64_t now_ms);

  const std::unique_ptr<MappedFile> file_;
  char* const map_;  // file_->data()
  const std::string path_;
  // A plain std::mutex: taken twice per collective, it must cost nothing
  // (Debian's Abseil runs absl::Mutex's deadlock detection on every lock).
  std::mutex mu_;
  uint64_t started_ = 0;   // Guarded by mu_.
  uint64_t finished_ = 0;  // Guarded by mu_.
  uint64_t reported_ = 0;  // Guarded by mu_.
  // The speed counters (progress.h): time outside and inside operations, and
  // since when the process has been in each (0: before its first operation).
  uint64_t compute_us_ = 0;    // Guarded by mu_.
  uint64_t wait_us_ = 0;       // Guarded by mu_.
  int64_t idle_since_ns_ = 0;  // Guarded by mu_.
  int64_t busy_since_ns_ = 0;  // Guarded by mu_.
};

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_SRC_PROGRESS_FILE_H_
