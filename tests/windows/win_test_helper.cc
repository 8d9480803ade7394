// A small Windows program the platform tests start (under wine): each mode
// does one thing a worker or a service does.
//
//   argv-hex ARGS...     prints each argument (as CommandLineToArgvW parses
//                        the command line) hex-encoded, one per line
//   exit CODE            exits with CODE (decimal or 0x...)
//   crash                writes through a null pointer
//   (STATUS_ACCESS_VIOLATION) print N              N lines "out i" on stdout
//   and "err i" on stderr, then
//                        "partial" without a newline on stdout
//   env NAME             prints the variable's value (or "<unset>")
//   cwd                  prints the working directory
//   affinity             prints its CPU affinity mask (hex)
//   tree PIDFILE         starts itself as "sleep 600000" (the grandchild),
//                        writes its pid to PIDFILE, then sleeps
//   ignore-stop          ignores console control events, prints "ready",
//                        sleeps 10 minutes
//   wait-stop            waits for MUSTER_STOP_EVENT (60 s at most), exits 7
//   sleep MS             sleeps, exits 0
//   lock PATH            holds platform::FileLock on PATH, prints "locked",
//                        sleeps 10 minutes
//   launcher PIDFILE     starts "sleep 600000" through ProcessLauncher (in a
//                        kill-on-close job), writes its pid, sleeps
//   service NAME MARKER  runs as the service NAME (RunService): Ready, then
//                        waits for a stop request; MARKER gets "running" and
//                        then "stopped by SIGTERM"
#include <windows.h>
// (after windows.h)
#include <fcntl.h>
#include <io.h>
#include <shellapi.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "muster/platform/env.h"
#include "muster/platform/files.h"
#include "muster/platform/process.h"
#include "muster/platform/service_host.h"
#include "muster/platform/signals.h"
#include "muster/platform/stop_requests.h"
#include "platform/windows/win_util.h"

namespace {

using muster::platform::windows::Narrow;

void Line(const std::string& s) {
  std::printf("%s\n", s.c_str());
  std::fflush(stdout);
}

BOOL WINAPI IgnoreAll(DWORD) { return TRUE; }

LONG WINAPI EndWithCode(EXCEPTION_POINTERS*) {
  // As Windows itself ends a process with an unhandled exception (and
  // without wine's debugger): the exception code becomes the exit code.
  return EXCEPTION_EXECUTE_HANDLER;
}

int Service(const std::string& name, const std::string& marker) {
  return muster::platform::RunService(name, [&marker]() {
    muster::platform::StopRequests stops({muster::platform::kSignalTerminate});
    muster::platform::ServiceHost::Default()->Ready("helper up");
    {
      std::ofstream(marker, std::ios::binary)
          << "running "
          << (muster::platform::ServiceHost::Default()->managed() ? "managed"
                                                                  : "console")
          << "\n";
    }
    const int sig = stops.Wait();
    muster::platform::ServiceHost::Default()->Stopping("stop request");
    std::ofstream(marker, std::ios::app | std::ios::binary)
        << "stopped by " << muster::platform::SignalName(sig) << "\n";
    return 0;
  });
}

}  // namespace

int main() {
  // The bytes as written ("\n", not "\r\n"): the tests compare them exactly.
  _setmode(_fileno(stdout), _O_BINARY);
  _setmode(_fileno(stderr), _O_BINARY);
  int argc = 0;
  wchar_t** wargv = CommandLineToArgvW(GetCommandLineW(), &argc);
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) args.push_back(Narrow(wargv[i]));
  LocalFree(wargv);
  if (args.size() < 2) return 2;
  const std::string& mode = args[1];
  auto arg = [&args](size_t i) { return i < args.size() ? args[i] : ""; };

  if (mode == "argv-hex") {
    for (size_t i = 2; i < args.size(); ++i) {
      std::string hex;
      char b[3];
      for (unsigned char c : args[i]) {
        std::snprintf(b, sizeof(b), "%02x", c);
        hex += b;
      }
      Line("[" + hex + "]");
    }
    return 0;
  }
  if (mode == "exit") {
    ExitProcess(static_cast<UINT>(std::strtoul(arg(2).c_str(), nullptr, 0)));
  }
  if (mode == "crash") {
    SetUnhandledExceptionFilter(EndWithCode);
    SetErrorMode(SEM_FAILCRITICALERRORS | SEM_NOGPFAULTERRORBOX);
    volatile int* p = nullptr;
    *p = 1;
    return 0;
  }
  if (mode == "print") {
    const int n = std::atoi(arg(2).c_str());
    for (int i = 0; i < n; ++i) {
      std::printf("out %d\n", i);
      std::fprintf(stderr, "err %d\n", i);
    }
    std::printf("partial");
    std::fflush(stdout);
    std::fflush(stderr);
    return 0;
  }
  if (mode == "env") {
    const char* v = std::getenv(arg(2).c_str());
    wchar_t buf[4096];
    const DWORD n = GetEnvironmentVariableW(
        muster::platform::windows::Widen(arg(2)).c_str(), buf, 4096);
    Line(v == nullptr && n == 0 ? "<unset>"
                                : Narrow(std::wstring_view(buf, n)));
    return 0;
  }
  if (mode == "cwd") {
    wchar_t buf[MAX_PATH];
    const DWORD n = GetCurrentDirectoryW(MAX_PATH, buf);
    Line(Narrow(std::wstring_view(buf, n)));
    return 0;
  }
  if (mode == "affinity") {
    DWORD_PTR mine = 0;
    DWORD_PTR system = 0;
    GetProcessAffinityMask(GetCurrentProcess(), &mine, &system);
    std::printf("%llx\n", static_cast<unsigned long long>(mine));
    return 0;
  }
  if (mode == "tree") {
    wchar_t exe[MAX_PATH];
    GetModuleFileNameW(nullptr, exe, MAX_PATH);
    std::wstring cmd = L"\"" + std::wstring(exe) + L"\" sleep 600000";
    STARTUPINFOW si{};
    si.cb = sizeof(si);
    PROCESS_INFORMATION pi{};
    if (!CreateProcessW(exe, cmd.data(), nullptr, nullptr, FALSE, 0, nullptr,
                        nullptr, &si, &pi)) {
      return 3;
    }
    std::ofstream(arg(2)) << pi.dwProcessId << "\n";
    Line("ready");
    Sleep(600000);
    return 0;
  }
  if (mode == "ignore-stop") {
    SetConsoleCtrlHandler(IgnoreAll, TRUE);
    Line("ready");
    Sleep(600000);
    return 0;
  }
  if (mode == "wait-stop") {
    SetConsoleCtrlHandler(IgnoreAll, TRUE);
    const char* name = std::getenv("MUSTER_STOP_EVENT");
    if (name == nullptr) return 4;
    HANDLE ev = OpenEventA(SYNCHRONIZE, FALSE, name);
    if (ev == nullptr) return 5;
    Line("ready");
    return WaitForSingleObject(ev, 60000) == WAIT_OBJECT_0 ? 7 : 6;
  }
  if (mode == "sleep") {
    Sleep(static_cast<DWORD>(std::atoi(arg(2).c_str())));
    return 0;
  }
  if (mode == "lock") {
    auto lock = muster::platform::FileLock::TryLock(arg(2));
    if (!lock.ok()) {
      Line(std::string(lock.status().message()));
      return 3;
    }
    Line("locked");
    Sleep(600000);
    return 0;
  }
  if (mode == "launcher") {
    wchar_t exe[MAX_PATH];
    const DWORD n = GetModuleFileNameW(nullptr, exe, MAX_PATH);
    muster::platform::ProcessSpec spec;
    spec.argv = {Narrow(std::wstring_view(exe, n)), "sleep", "600000"};
    spec.env = muster::platform::CurrentEnvironment();
    auto group =
        muster::platform::ProcessLauncher::Default()->Start({spec}, {});
    if (!group.ok()) return 3;
    std::ofstream(arg(2), std::ios::binary) << (*group)->pids()[0] << "\n";
    Line("ready");
    Sleep(600000);
    return 0;
  }
  if (mode == "service") return Service(arg(2), arg(3));
  return 2;
}
