// The state a Windows process group shares with its threads (one waiter for
// the process handles, one reader per output pipe), and the readers. Private
// to platform/windows.
//
// Anonymous pipes on Windows cannot be waited on together (no overlapped I/O,
// no poll), so each pipe gets a thread blocked in ReadFile; the lines they
// cut are written to the console and the filtered files under one mutex, one
// WriteFile per line, so lines of different processes never mix. Every
// thread holds the shared state by shared_ptr: one that does not finish in
// time is detached without touching freed memory.
#ifndef MUSTER_PLATFORM_WINDOWS_OUTPUT_WINDOWS_H_
#define MUSTER_PLATFORM_WINDOWS_OUTPUT_WINDOWS_H_

#include <windows.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "muster/platform/process.h"
#include "platform/src/line_splitter.h"
#include "platform/windows/win_util.h"

namespace muster::platform::windows {

inline constexpr size_t kMaxLine = 64 * 1024;

struct ProcState {
  std::string name;
  int pid = 0;
  UniqueHandle process;
  UniqueHandle job;
  bool recorded = false;   // `exit` is final
  bool killed = false;     // muster terminated its job
  bool stop_sent = false;  // a stop (Ctrl-Break, the stop event) was sent
  int stop_signal = 0;
  ProcessExit exit;
  std::string kill_reason;
  std::string last_stderr_line;
};

struct Shared {
  absl::Mutex mu;
  std::vector<ProcState> procs ABSL_GUARDED_BY(mu);
  int unrecorded ABSL_GUARDED_BY(mu) = 0;
  bool any_failed ABSL_GUARDED_BY(mu) = false;
  int readers_left ABSL_GUARDED_BY(mu) = 0;
  bool waiter_done ABSL_GUARDED_BY(mu) = false;
  bool waiter_quit ABSL_GUARDED_BY(mu) = false;
  // Wakes the waiter (set on Stop and Kill); const after construction.
  UniqueHandle wake;
  // The group's stop event (its name is in each process's MUSTER_STOP_EVENT):
  // a graceful stop that needs no console.
  UniqueHandle stop_event;

  // Serializes the writes of the reader threads to shared destinations.
  absl::Mutex write_mu;
  // LaunchOptions::on_exit; const once the threads start.
  std::function<void()> on_exit;
};

// One output pipe of one process, owned by its reader thread.
struct Stream {
  UniqueHandle pipe;
  std::string prefix;
  HANDLE console = nullptr;  // not owned; null: none
  UniqueHandle file;
  std::string file_name;
  bool file_broken = false;
  size_t proc_index = 0;
  bool is_stderr = false;
  std::shared_ptr<UniqueHandle> filtered;
  std::shared_ptr<const std::vector<std::string>> filters;
};

// Opens (creates, truncates) a log file, creating its directories. Errors:
// FAILED_PRECONDITION naming the file and the reason.
absl::StatusOr<UniqueHandle> OpenLogFile(const std::string& path);

// The handle behind a LaunchOptions console descriptor (a CRT fd); null when
// it names nothing.
HANDLE ConsoleHandle(int fd);

// A reader thread: reads `stream` to EOF and routes each whole line; counts
// itself out of shared->readers_left at the end.
void ReadStream(std::shared_ptr<Shared> shared, Stream stream);

// Records how process `index` ended from its exit code.
void RecordExit(Shared& shared, size_t index, DWORD code);

// The waiter thread: waits on the process handles and records each exit.
void WaitLoop(std::shared_ptr<Shared> shared);

}  // namespace muster::platform::windows

#endif  // MUSTER_PLATFORM_WINDOWS_OUTPUT_WINDOWS_H_
