// ReadNativeStacks on Linux, with elfutils' libdwfl inside this process.
//
// Why in process, and not eu-stack or gdb as a child: the agent is the
// workers' parent, and Linux's Yama (kernel.yama.ptrace_scope=1, the default
// of most distributions) lets a process ptrace only its own descendants. A
// debugger the agent starts is the workers' sibling and is refused there; the
// agent itself is allowed. libdwfl attaches to one thread at a time
// (dwfl_linux_proc_attach: PTRACE_ATTACH as each thread is unwound, detached
// right after), so a worker's thread is stopped for about a millisecond, not
// for the whole capture.
//
// Function names come from the modules' symbol tables (dwfl_module_addrname),
// or, for code the symbol table does not name, from DWARF (the innermost
// scope's function, inlined ones included), and are demangled.
#include "muster/platform/stack_reader.h"

#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace muster::platform {
namespace {

std::string Demangle(const char* name) {
  if (name == nullptr) return "??";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(
      abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  if (status == 0 && out != nullptr) return out.get();
  // A versioned symbol's version ("__libc_start_main@@GLIBC_2.34") says
  // nothing about where the thread is.
  std::string plain(name);
  if (size_t at = plain.find('@'); at != std::string::npos && at > 0)
    plain.resize(at);
  return plain;
}

// The function a DWARF scope names at pc, or null.
const char* DwarfFunction(Dwfl_Module* module, Dwarf_Addr pc) {
  Dwarf_Addr bias = 0;
  Dwarf_Die* cu = dwfl_module_addrdie(module, pc, &bias);
  if (cu == nullptr) return nullptr;
  Dwarf_Die* scopes = nullptr;
  const int n = dwarf_getscopes(cu, pc - bias, &scopes);
  const char* name = nullptr;
  for (int i = 0; i < n && name == nullptr; ++i) {
    const int tag = dwarf_tag(&scopes[i]);
    if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine)
      name = dwarf_diename(&scopes[i]);
  }
  std::free(scopes);
  return name;
}

std::string ThreadName(int pid, int64_t tid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/task/", tid, "/comm"));
  std::string name;
  std::getline(in, name);
  return name;
}

struct Walk {
  Dwfl* dwfl = nullptr;
  int pid = 0;
  int max_frames = 64;
  std::vector<NativeThreadStack> threads;
};

int OnFrame(Dwfl_Frame* frame, void* arg) {
  auto* walk = static_cast<Walk*>(arg);
  NativeThreadStack& thread = walk->threads.back();
  Dwarf_Addr pc = 0;
  bool activation = false;
  if (!dwfl_frame_pc(frame, &pc, &activation)) return DWARF_CB_ABORT;
  // A return address points after the call: look up the call itself.
  const Dwarf_Addr lookup = activation ? pc : pc - 1;
  Dwfl_Module* module = dwfl_addrmodule(walk->dwfl, lookup);
  const char* name = nullptr;
  if (module != nullptr) {
    name = dwfl_module_addrname(module, lookup);
    if (name == nullptr) name = DwarfFunction(module, lookup);
  }
  thread.frames.push_back(Demangle(name));
  return static_cast<int>(thread.frames.size()) >= walk->max_frames
             ? DWARF_CB_ABORT
             : DWARF_CB_OK;
}

int OnThread(Dwfl_Thread* thread, void* arg) {
  auto* walk = static_cast<Walk*>(arg);
  NativeThreadStack stack;
  stack.tid = dwfl_thread_tid(thread);
  stack.main = stack.tid == walk->pid;
  stack.name = ThreadName(walk->pid, stack.tid);
  walk->threads.push_back(std::move(stack));
  // An unwind that ends early (no CFI for a frame) keeps what it has.
  (void)dwfl_thread_getframes(thread, OnFrame, walk);
  return DWARF_CB_OK;
}

}  // namespace

absl::StatusOr<std::vector<NativeThreadStack>> ReadNativeStacks(
    int pid, int max_frames) {
  if (::kill(pid, 0) != 0 && errno == ESRCH)
    return absl::NotFoundError(absl::StrCat("process ", pid, " is gone"));
  static char* debuginfo_path = nullptr;
  static const Dwfl_Callbacks callbacks = {dwfl_linux_proc_find_elf,
                                           dwfl_standard_find_debuginfo,
                                           nullptr, &debuginfo_path};
  std::unique_ptr<Dwfl, void (*)(Dwfl*)> dwfl(dwfl_begin(&callbacks), dwfl_end);
  if (dwfl == nullptr)
    return absl::InternalError(absl::StrCat("libdwfl: ", dwfl_errmsg(-1)));
  if (int e = dwfl_linux_proc_report(dwfl.get(), pid); e != 0) {
    return absl::NotFoundError(absl::StrCat(
        "cannot read the memory map of process ", pid, ": ",
        e > 0 ? std::string(strerror(e)) : std::string(dwfl_errmsg(-1))));
  }
  if (dwfl_report_end(dwfl.get(), nullptr, nullptr) != 0)
    return absl::InternalError(absl::StrCat("libdwfl: ", dwfl_errmsg(-1)));
  if (int e = dwfl_linux_proc_attach(dwfl.get(), pid, false); e != 0) {
    const std::string why =
        e > 0 ? std::string(strerror(e)) : std::string(dwfl_errmsg(-1));
    if (e == EPERM) {
      return absl::PermissionDeniedError(absl::StrCat(
          "not allowed to trace process ", pid, " (", why,
          "): the agent must be its ancestor under Yama ptrace_scope=1, and a "
          "container needs ptrace allowed (Docker's default seccomp profile "
          "allows it on Linux 4.8+; otherwise add --cap-add=SYS_PTRACE)"));
    }
    return absl::UnavailableError(
        absl::StrCat("cannot attach to process ", pid, ": ", why));
  }
  Walk walk;
  walk.dwfl = dwfl.get();
  walk.pid = pid;
  walk.max_frames = max_frames > 0 ? max_frames : 64;
  if (dwfl_getthreads(dwfl.get(), OnThread, &walk) != 0 &&
      walk.threads.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot read the threads of process ", pid, ": ", dwfl_errmsg(-1)));
  }
  // Main thread first.
  std::stable_partition(walk.threads.begin(), walk.threads.end(),
                        [](const NativeThreadStack& t) { return t.main; });
  return walk.threads;
}

int StacksSignal() { return SIGRTMIN + 7; }

std::string StacksEventPrefix() { return ""; }

absl::Status SignalForStacks(int pid) {
  if (::kill(pid, StacksSignal()) == 0) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("cannot signal process ", pid, ": ", strerror(errno)));
}

}  // namespace muster::platform
