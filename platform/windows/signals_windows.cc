// Signal names on Windows: the numbers of signals.h (the launcher maps them to
// Ctrl-C / Ctrl-Break, the stop event and TerminateJobObject), and the
// NTSTATUS codes a crashed process exits with.
#include <windows.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "muster/platform/signals.h"

namespace muster::platform {
namespace {

struct Named {
  int number;
  const char* name;
};
constexpr Named kNames[] = {{kSignalHangup, "HUP"},
                            {kSignalInterrupt, "INT"},
                            {kSignalQuit, "QUIT"},
                            {kSignalKill, "KILL"},
                            {kSignalTerminate, "TERM"}};

struct Status {
  DWORD code;
  const char* name;
  const char* what;
};
// The NTSTATUS codes a process most often ends with when it crashes or is
// stopped (ntstatus.h).
constexpr Status kStatuses[] = {
    {0xC0000005, "STATUS_ACCESS_VIOLATION", "an access violation"},
    {0xC0000409, "STATUS_STACK_BUFFER_OVERRUN",
     "a stack buffer overrun or a fail-fast exit (abort())"},
    {0xC00000FD, "STATUS_STACK_OVERFLOW", "a stack overflow"},
    {0xC000001D, "STATUS_ILLEGAL_INSTRUCTION", "an illegal instruction"},
    {0xC0000094, "STATUS_INTEGER_DIVIDE_BY_ZERO",
     "an integer division by zero"},
    {0xC0000096, "STATUS_PRIVILEGED_INSTRUCTION", "a privileged instruction"},
    {0xC0000006, "STATUS_IN_PAGE_ERROR", "a page that could not be read in"},
    {0xC0000017, "STATUS_NO_MEMORY", "out of memory"},
    {0xC000013A, "STATUS_CONTROL_C_EXIT", "ended by Ctrl-C or Ctrl-Break"},
    {0xC0000135, "STATUS_DLL_NOT_FOUND", "a DLL it needs was not found"},
    {0xC0000139, "STATUS_ENTRYPOINT_NOT_FOUND",
     "a DLL lacks a function it needs"},
    {0xC0000142, "STATUS_DLL_INIT_FAILED", "a DLL failed to initialize"},
    {0xC0000374, "STATUS_HEAP_CORRUPTION", "heap corruption"},
    {0x80000003, "STATUS_BREAKPOINT", "a breakpoint"},
};

}  // namespace

std::string SignalName(int signal) {
  for (const Named& n : kNames) {
    if (n.number == signal) return absl::StrCat("SIG", n.name);
  }
  return absl::StrCat("signal ", signal);
}

int SignalNumber(const std::string& name) {
  std::string n = absl::AsciiStrToUpper(name);
  if (absl::StartsWith(n, "SIG")) n = n.substr(3);
  for (const Named& k : kNames) {
    if (n == k.name) return k.number;
  }
  return -1;
}

std::string DescribeExitCode(int exit_code) {
  const DWORD code = static_cast<DWORD>(exit_code);
  for (const Status& s : kStatuses) {
    if (s.code == code) {
      return absl::StrFormat("exited with code 0x%08X (%s: %s)", code, s.name,
                             s.what);
    }
  }
  // Another error or warning NTSTATUS (severity bits 11 or 10).
  if ((code & 0xC0000000) == 0xC0000000 || (code & 0xC0000000) == 0x80000000) {
    return absl::StrFormat(
        "exited with code 0x%08X (an NTSTATUS: the process "
        "crashed or was ended by the system)",
        code);
  }
  return absl::StrCat("exited with code ", exit_code);
}

}  // namespace muster::platform
