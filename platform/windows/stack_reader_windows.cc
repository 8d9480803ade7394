// ReadNativeStacks on Windows: not yet (DbgHelp's StackWalk64 would be the
// way; docs/troubleshooting.md says what to use meanwhile).
#include "absl/strings/str_cat.h"
#include "muster/platform/stack_reader.h"

namespace muster::platform {

absl::StatusOr<std::vector<NativeThreadStack>> ReadNativeStacks(int pid, int) {
  return absl::UnimplementedError(absl::StrCat(
      "stacks are not available on Windows yet (process ", pid,
      "); attach a debugger (WinDbg, Visual Studio) to the worker meanwhile"));
}

int StacksSignal() { return 0; }

absl::Status SignalForStacks(int pid) {
  return absl::UnimplementedError(absl::StrCat(
      "stacks are not available on Windows yet (process ", pid, ")"));
}

}  // namespace muster::platform
