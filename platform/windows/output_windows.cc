#include "platform/windows/output_windows.h"

#include <io.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "muster/platform/logging.h"
#include "muster/platform/signals.h"
#include "platform/windows/spawn_windows.h"

namespace muster::platform::windows {
namespace {

void RouteLine(Shared& shared, Stream& s, absl::string_view text, bool newline,
               std::string& buf) {
  if (s.is_stderr) {
    absl::string_view t = absl::StripAsciiWhitespace(text);
    if (!t.empty()) {
      absl::MutexLock lock(&shared.mu);
      shared.procs[s.proc_index].last_stderr_line =
          std::string(t.substr(0, 1024));
    }
  }
  const bool to_filtered =
      s.filtered != nullptr && s.filters != nullptr &&
      std::any_of(s.filters->begin(), s.filters->end(),
                  [text](const std::string& f) {
                    return text.find(f) != absl::string_view::npos;
                  });
  if (to_filtered || s.console != nullptr) {
    buf = absl::StrCat(s.prefix, text, "\n");
    absl::MutexLock lock(&shared.write_mu);
    if (to_filtered && !WriteAll(s.filtered->get(), buf)) s.filtered.reset();
    // A console that went away must not stop the workers or the files.
    if (s.console != nullptr && !WriteAll(s.console, buf)) s.console = nullptr;
  }
  if (s.file.valid() && !s.file_broken) {
    // The process's bytes exactly: no prefix, '\n' only where it wrote one.
    buf.assign(text.data(), text.size());
    if (newline) buf.push_back('\n');
    if (!WriteAll(s.file.get(), buf)) {
      MUSTER_LOG(ERROR) << "writing the log file " << s.file_name
                        << " failed: " << LastErrorText()
                        << "; its further output is lost";
      s.file_broken = true;
    }
  }
}

}  // namespace

absl::StatusOr<UniqueHandle> OpenLogFile(const std::string& path) {
  const std::filesystem::path p(Widen(path));
  std::error_code ec;
  if (p.has_parent_path())
    std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create log directory '", Narrow(p.parent_path().wstring()),
        "': ", ec.message(), "; check --log-dir"));
  }
  UniqueHandle h(
      CreateFileW(Widen(path).c_str(), GENERIC_WRITE,
                  FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                  nullptr, CREATE_ALWAYS, FILE_ATTRIBUTE_NORMAL, nullptr));
  if (!h.valid()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open log file '", path, "': ", LastErrorText(),
                     "; check --log-dir"));
  }
  return h;
}

HANDLE ConsoleHandle(int fd) {
  if (fd < 0) return nullptr;
  HANDLE h = reinterpret_cast<HANDLE>(_get_osfhandle(fd));
  if (h == INVALID_HANDLE_VALUE || h == nullptr) {
    // A program without CRT streams for 1 and 2 (a service): the standard
    // handles, if any.
    if (fd == 1) h = GetStdHandle(STD_OUTPUT_HANDLE);
    if (fd == 2) h = GetStdHandle(STD_ERROR_HANDLE);
  }
  return (h == INVALID_HANDLE_VALUE) ? nullptr : h;
}

void ReadStream(std::shared_ptr<Shared> shared, Stream stream) {
  internal::LineSplitter splitter(kMaxLine);
  std::string buf;
  std::vector<char> chunk(kMaxLine);
  auto emit = [&](absl::string_view text, bool newline) {
    RouteLine(*shared, stream, text, newline, buf);
  };
  while (true) {
    DWORD n = 0;
    // Fails with ERROR_BROKEN_PIPE once every writer (the process and all it
    // started that inherited the pipe) is gone.
    if (!ReadFile(stream.pipe.get(), chunk.data(),
                  static_cast<DWORD>(chunk.size()), &n, nullptr)) {
      break;
    }
    if (n > 0) splitter.Feed(absl::string_view(chunk.data(), n), emit);
  }
  splitter.Flush(emit);
  stream.pipe.reset();
  stream.file.reset();
  absl::MutexLock lock(&shared->mu);
  --shared->readers_left;
}

void RecordExit(Shared& shared, size_t index, DWORD code) {
  absl::MutexLock lock(&shared.mu);
  ProcState& p = shared.procs[index];
  if (p.recorded) return;
  ProcessExit exit;
  exit.index = index;
  exit.pid = p.pid;
  exit.kill_reason = p.kill_reason;
  exit.end_time = absl::Now();
  if (p.killed && code == kKilledExitCode) {
    exit.exit_code = -1;
    exit.signal = kSignalKill;
  } else if (p.stop_sent && code == STATUS_CONTROL_C_EXIT) {
    // Ended by the Ctrl-Break muster sent: as a process killed by the signal
    // that asked it to stop.
    exit.exit_code = -1;
    exit.signal = p.stop_signal;
  } else {
    exit.exit_code = static_cast<int>(code);
  }
  p.exit = std::move(exit);
  p.recorded = true;
  --shared.unrecorded;
  if (!p.exit.succeeded()) shared.any_failed = true;
}

void WaitLoop(std::shared_ptr<Shared> shared) {
  std::vector<HANDLE> handles;
  while (true) {
    handles.clear();
    {
      absl::MutexLock lock(&shared->mu);
      if (shared->unrecorded == 0 || shared->waiter_quit) break;
      handles.push_back(shared->wake.get());
      for (size_t i = 0; i < shared->procs.size(); ++i) {
        if (shared->procs[i].recorded) continue;
        if (handles.size() == MAXIMUM_WAIT_OBJECTS) break;
        handles.push_back(shared->procs[i].process.get());
      }
    }
    // More than 63 processes: the rest are looked at on the timeout.
    WaitForMultipleObjects(static_cast<DWORD>(handles.size()), handles.data(),
                           FALSE, 250);
    ResetEvent(shared->wake.get());
    // The process handles stay open until the shared state goes, so reading
    // them here without the lock is safe.
    std::vector<std::pair<size_t, DWORD>> ended;
    {
      absl::MutexLock lock(&shared->mu);
      for (size_t i = 0; i < shared->procs.size(); ++i) {
        const ProcState& p = shared->procs[i];
        if (p.recorded ||
            WaitForSingleObject(p.process.get(), 0) != WAIT_OBJECT_0)
          continue;
        DWORD code = 0;
        if (!GetExitCodeProcess(p.process.get(), &code)) code = 0xFFFFFFFF;
        ended.emplace_back(i, code);
      }
    }
    for (const auto& [i, code] : ended) RecordExit(*shared, i, code);
    if (!ended.empty() && shared->on_exit) shared->on_exit();
  }
  absl::MutexLock lock(&shared->mu);
  shared->waiter_done = true;
}

}  // namespace muster::platform::windows
