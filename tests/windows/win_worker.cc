// win_worker: the stand-in training program of the Windows launcher tests
// (tests/windows/launcher_wine_test.sh runs `muster.exe ... win_worker.exe`
// under wine). Every flag is optional; in this order it:
//   1. prints `env NAME=VALUE` for each variable of the worker environment
//      contract (`<unset>` when absent), when --print-env;
//   2. with --beat-file=PATH, writes an increasing counter to PATH<RANK>
//      every 100 ms from a thread, until it ends (a test that kills the
//      launcher sees the counter stop when the worker is gone);
//   3. sleeps --sleep=SECONDS, or with --hang until killed (the stop event,
//      MUSTER_STOP_EVENT, is ignored: the launcher must terminate it); with
//      --stacks-odd-rank=N it hangs until killed in a named function for
//      `muster stacks` to find: rank N in StuckInDataLoader_Muster, every
//      other rank in WaitInBarrier_Muster, with a second thread, named
//      "muster-helper", in HelperThreadLoop_Muster; with --fake-python-stacks
//      it also plays the Python bootstrap of `muster stacks` on Windows
//      (agent/src/python_prelude.cc), for tests without a Windows Python:
//      creates the event MUSTER_STACKS_EVENT + pid, writes the ready line to
//      MUSTER_STACKS_FILE, and on each set of the event appends a
//      faulthandler-style dump from a watcher thread (=mute: never dumps, as
//      when a thread holds the GIL);
//   4. fails when its global rank is --fail-rank (every rank when not given)
//      and TORCHELASTIC_RESTART_COUNT is --fail-restart-count (any when not
//      given): exits with --exit-code=N, or with --crash writes through a
//      null pointer (STATUS_ACCESS_VIOLATION);
//   5. otherwise prints "win_worker rank R done" and exits 0.
#include <windows.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>

#include "tests/workers/worker_env_names.h"

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "<unset>" : v;
}

long EnvLong(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v == nullptr ? fallback : std::strtol(v, nullptr, 10);
}

bool Flag(std::string_view arg, std::string_view name, std::string* value) {
  if (arg.substr(0, name.size()) != name) return false;
  if (arg.size() == name.size()) {
    value->clear();
    return true;
  }
  if (arg[name.size()] != '=') return false;
  *value = std::string(arg.substr(name.size() + 1));
  return true;
}

LONG WINAPI EndWithCode(EXCEPTION_POINTERS*) {
  // As Windows itself ends a process with an unhandled exception (and
  // without wine's debugger): the exception code becomes the exit code.
  return EXCEPTION_EXECUTE_HANDLER;
}

std::atomic<bool> g_stop_beats{false};

void Beat(const std::string& path) {
  for (long n = 1; !g_stop_beats.load(); ++n) {
    {
      std::ofstream out(path, std::ios::trunc);
      out << n << "\n";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

// The named functions of --stacks-odd-rank: outside the anonymous namespace
// and not inlined, so that they keep their own frames and symbols; each
// sleeps in a loop, so that its call to Sleep is no tail call (which would
// leave no frame of it), with its own period, so that the compiler does not
// fold the two into one (-fipa-icf).
namespace muster_test {

__attribute__((noinline)) void WaitInBarrier_Muster() {
  for (;;) Sleep(1000);
}

__attribute__((noinline)) void StuckInDataLoader_Muster() {
  for (;;) Sleep(1001);
}

__attribute__((noinline)) void HelperThreadLoop_Muster() {
  for (;;) Sleep(1002);
}

}  // namespace muster_test

namespace {

// SetThreadDescription when this Windows has it (10 1607+; wine 5+).
void NameThisThread(const wchar_t* name) {
  using SetFn = HRESULT(WINAPI*)(HANDLE, PCWSTR);
  HMODULE kernel32 = GetModuleHandleW(L"kernel32.dll");
  FARPROC p = kernel32 == nullptr
                  ? nullptr
                  : GetProcAddress(kernel32, "SetThreadDescription");
  if (p != nullptr) {
    reinterpret_cast<SetFn>(reinterpret_cast<void*>(p))(GetCurrentThread(),
                                                        name);
  }
}

// --fake-python-stacks: see the top of the file. The dump names the main
// thread's Python function after the native one it hangs in.
void FakePythonStacks(bool odd, bool mute) {
  const char* file = std::getenv("MUSTER_STACKS_FILE");
  const char* prefix = std::getenv("MUSTER_STACKS_EVENT");
  if (file == nullptr || prefix == nullptr) return;
  const std::string name =
      prefix +
      std::to_string(static_cast<unsigned long>(GetCurrentProcessId()));
  HANDLE event = CreateEventA(nullptr, FALSE, FALSE, name.c_str());
  if (event == nullptr) return;
  const DWORD main_tid = GetCurrentThreadId();
  const std::string path = file;
  std::atomic<DWORD> watcher_tid{0};
  std::thread([&watcher_tid, event, main_tid, path, odd, mute] {
    const DWORD me = GetCurrentThreadId();
    watcher_tid = me;
    while (WaitForSingleObject(event, INFINITE) == WAIT_OBJECT_0) {
      if (mute) continue;
      char dump[1024];
      std::snprintf(
          dump, sizeof(dump),
          "Thread 0x%08lx (most recent call first):\n"
          "  File \"C:\\w\\train.py\", line 5 in background_prefetch\n"
          "\n"
          "Current thread 0x%08lx (most recent call first):\n"
          "  File \"<string>\", line 30 in _muster_watch\n"
          "\n"
          "Thread 0x%08lx (most recent call first):\n"
          "  File \"C:\\w\\train.py\", line 9 in %s\n"
          "  File \"C:\\w\\train.py\", line 23 in <module>\n"
          "  File \"C:\\Python312\\Lib\\runpy.py\", line 88 in _run_code\n",
          0x1UL, static_cast<unsigned long>(me),
          static_cast<unsigned long>(main_tid),
          odd ? "stuck_in_data_loader" : "wait_in_allreduce");
      std::ofstream(path, std::ios::app | std::ios::binary) << dump;
    }
  }).detach();
  while (watcher_tid == 0) Sleep(1);
  std::ofstream(path, std::ios::app | std::ios::binary)
      << "muster-stacks-ready main=" << std::hex << main_tid
      << " watcher=" << watcher_tid.load() << "\n";
}

// fake_python: "" none, else the value of --fake-python-stacks.
[[noreturn]] void HangForStacks(long rank, long odd_rank,
                                const std::string* fake_python) {
  std::thread([] {
    NameThisThread(L"muster-helper");
    muster_test::HelperThreadLoop_Muster();
  }).detach();
  const bool odd = rank == odd_rank;
  if (fake_python != nullptr) FakePythonStacks(odd, *fake_python == "mute");
  std::printf("win_worker rank %ld waiting in %s\n", rank,
              odd ? "StuckInDataLoader_Muster" : "WaitInBarrier_Muster");
  std::fflush(stdout);
  if (odd) muster_test::StuckInDataLoader_Muster();
  muster_test::WaitInBarrier_Muster();
  std::abort();  // not reached
}

}  // namespace

int main(int argc, char** argv) {
  bool print_env = false, hang = false, crash = false;
  double sleep_s = 0;
  int exit_code = 0;
  long fail_rank = -1, fail_restart = -1, stacks_odd_rank = -2;
  bool fake_python = false;
  std::string fake_python_mode;
  std::string beat_file;
  for (int i = 1; i < argc; ++i) {
    std::string v;
    if (Flag(argv[i], "--print-env", &v)) {
      print_env = true;
    } else if (Flag(argv[i], "--hang", &v)) {
      hang = true;
    } else if (Flag(argv[i], "--crash", &v)) {
      crash = true;
    } else if (Flag(argv[i], "--sleep", &v)) {
      sleep_s = std::atof(v.c_str());
    } else if (Flag(argv[i], "--exit-code", &v)) {
      exit_code = std::atoi(v.c_str());
    } else if (Flag(argv[i], "--fail-rank", &v)) {
      fail_rank = std::atol(v.c_str());
    } else if (Flag(argv[i], "--fail-restart-count", &v)) {
      fail_restart = std::atol(v.c_str());
    } else if (Flag(argv[i], "--stacks-odd-rank", &v)) {
      stacks_odd_rank = std::atol(v.c_str());
    } else if (Flag(argv[i], "--fake-python-stacks", &v)) {
      fake_python = true;
      fake_python_mode = v;
    } else if (Flag(argv[i], "--beat-file", &v)) {
      beat_file = v;
    } else {
      std::fprintf(stderr, "win_worker: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  const long rank = EnvLong("RANK", -1);
  if (print_env) {
    for (const char* name : muster::testing::kWorkerEnvNames) {
      std::printf("env %s=%s\n", name, Env(name).c_str());
    }
    std::fflush(stdout);
  }
  std::thread beats;
  if (!beat_file.empty()) {
    beats = std::thread(Beat, beat_file + std::to_string(rank));
  }
  if (stacks_odd_rank != -2) {
    HangForStacks(rank, stacks_odd_rank,
                  fake_python ? &fake_python_mode : nullptr);
  }
  if (hang) {
    std::printf("win_worker rank %ld hanging\n", rank);
    std::fflush(stdout);
    Sleep(INFINITE);
  }
  if (sleep_s > 0) Sleep(static_cast<DWORD>(sleep_s * 1000));
  g_stop_beats = true;
  if (beats.joinable()) beats.join();
  const bool should_fail =
      (exit_code != 0 || crash) && (fail_rank < 0 || fail_rank == rank) &&
      (fail_restart < 0 ||
       fail_restart == EnvLong("TORCHELASTIC_RESTART_COUNT", -1));
  if (should_fail) {
    std::fprintf(stderr, "win_worker rank %ld failing\n", rank);
    std::fflush(stderr);
    if (crash) {
      SetUnhandledExceptionFilter(EndWithCode);
      SetErrorMode(SEM_FAILCRITICALERRORS | SEM_NOGPFAULTERRORBOX);
      volatile int* null = nullptr;
      *null = 1;
    }
    return exit_code;
  }
  std::printf("win_worker rank %ld done\n", rank);
  return 0;
}
