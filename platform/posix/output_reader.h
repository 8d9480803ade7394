// The state a POSIX process group shares with its two threads (the output
// reader and the reaper), and the reader. Private to platform/posix.
//
// Threads and ownership: the state shared with the threads lives in `Shared`,
// held by shared_ptr from the group and from each thread. Stop waits for the
// threads with deadlines and detaches one that does not finish (a process
// stuck in uninterruptible sleep, a console nobody reads), so neither Stop nor
// the destructor can hang, and a detached thread never touches freed memory.
#ifndef MUSTER_PLATFORM_POSIX_OUTPUT_READER_H_
#define MUSTER_PLATFORM_POSIX_OUTPUT_READER_H_

#include <atomic>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "muster/platform/process.h"
#include "platform/posix/fd.h"
#include "platform/src/line_splitter.h"

namespace muster::platform::posix {

// Output pieces: lines longer than this reach the console and the files in
// pieces.
inline constexpr size_t kMaxLine = 64 * 1024;

struct ProcState {
  ProcessSpec spec;
  std::string name;
  int pid = -1;
  bool reaped =
      false;  // waitpid returned it: its pid may be reused from now on
  bool recorded = false;  // `exit` is final
  ProcessExit exit;
  // Why Kill killed it, reported as its kill_reason.
  std::string kill_reason;
  // Kept by the reader: see ProcessExit::last_stderr_line.
  std::string last_stderr_line;
};

struct Shared {
  ~Shared();

  absl::Mutex mu;
  std::vector<ProcState> procs ABSL_GUARDED_BY(mu);
  int unrecorded ABSL_GUARDED_BY(mu) = 0;
  bool any_failed ABSL_GUARDED_BY(mu) = false;
  bool reaper_done ABSL_GUARDED_BY(mu) = false;
  bool reader_done ABSL_GUARDED_BY(mu) = false;

  // The reader stops waiting for EOF when this is set and it is woken through
  // the eventfd.
  std::atomic<bool> reader_quit{false};
  int reader_wake_fd = -1;  // const after construction; closed by ~Shared
  // LaunchOptions::on_exit; const once the threads start.
  std::function<void()> on_exit;
};

// One output pipe of one process, owned by the reader thread.
struct Stream {
  UniqueFd fd;
  std::string prefix;  // "[rank3]:" or empty
  int console_fd = -1;
  UniqueFd file;
  std::string file_name;  // for the error when writing it fails
  internal::LineSplitter splitter{kMaxLine};
  bool file_broken = false;
  // The process's index in Shared::procs, and whether this is its stderr
  // (whose last line is kept for the failure report).
  size_t proc_index = 0;
  bool is_stderr = false;
  Shared* shared = nullptr;  // outlives the reader (it holds a reference)
  // Filtered routes: matching lines also go to this shared file.
  std::shared_ptr<UniqueFd> filtered;
  std::shared_ptr<const std::vector<std::string>> filters;
};

// Opens a log file for writing, creating its directories. Errors:
// FAILED_PRECONDITION naming the file or directory and the reason.
absl::StatusOr<UniqueFd> OpenLogFile(const std::filesystem::path& path);

// The reader thread: polls every stream until EOF (or until told to quit) and
// routes each whole line; sets shared->reader_done at the end.
void ReaderLoop(std::shared_ptr<Shared> shared, std::vector<Stream> streams);

}  // namespace muster::platform::posix

#endif  // MUSTER_PLATFORM_POSIX_OUTPUT_READER_H_
