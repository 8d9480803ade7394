// Reads the native stacks of a running process: every thread, function names
// innermost first, each thread stopped only for the moment its registers and
// stack are read. How the agent answers `muster stacks` and writes the hang
// report (agent/src/stack_capture.h).
#ifndef MUSTER_PLATFORM_STACK_READER_H_
#define MUSTER_PLATFORM_STACK_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace muster::platform {

struct NativeThreadStack {
  int64_t tid = 0;
  std::string name;   // the thread's name (Linux: /proc/PID/task/TID/comm)
  bool main = false;  // the process's first thread
  // Function names, innermost first ("??" for a frame with no symbol;
  // C++ names demangled).
  std::vector<std::string> frames;
};

// Every thread of `pid`, at most `max_frames` frames each. Linux: elfutils'
// libdwfl in this process (posix/stack_reader.cc; why not eu-stack or gdb is
// explained there). Windows: DbgHelp's StackWalk64 in this process, names
// from PDBs or a MinGW image's COFF symbol table
// (windows/stack_reader_windows.cc). Errors: PERMISSION_DENIED when the OS
// refuses to let this process trace pid (Linux: not its descendant, a
// container without ptrace; Windows: OpenProcess refused), NOT_FOUND when
// pid is gone.
absl::StatusOr<std::vector<NativeThreadStack>> ReadNativeStacks(
    int pid, int max_frames = 64);

// How the agent asks a Python worker for a faulthandler dump of its stacks
// (the bootstrap, agent/src/python_prelude.cc). Linux: a signal the bootstrap
// registers faulthandler for, SIGRTMIN+7, a real-time signal no common
// library uses (Python, PyTorch and NCCL use none). Windows has no such
// signal (StacksSignal() is 0): the bootstrap creates the auto-reset event
// named StacksEventPrefix() + its pid ("Local\muster-stacks-1234") and a
// thread that waits on it and dumps when it is set; "" on Linux.
int StacksSignal();
std::string StacksEventPrefix();

// Asks pid for the dump: sends StacksSignal() (Linux) or sets the event
// (Windows; UNAVAILABLE when pid has none, i.e. no bootstrap runs there).
absl::Status SignalForStacks(int pid);

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_STACK_READER_H_
