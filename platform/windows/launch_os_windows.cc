// Windows answers to muster/platform/launch_os.h.
#include <stdlib.h>
#include <windows.h>

#include <algorithm>
#include <bitset>
#include <string>

#include "absl/strings/ascii.h"
#include "muster/platform/launch_os.h"
#include "muster/platform/signals.h"
#include "platform/windows/win_util.h"

namespace muster::platform::os {
namespace {

// The extension of the last path component, lower case, with its dot.
std::string LowerExtension(const std::string& path) {
  const size_t sep = path.find_last_of("\\/:");
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos || (sep != std::string::npos && dot < sep)) {
    return "";
  }
  return absl::AsciiStrToLower(path.substr(dot));
}

}  // namespace

int UsableCpuCount() {
  // The process's affinity mask covers its processor group (64 CPUs at
  // most); on a machine with one group that is what this process may use
  // (start /affinity, a job's limits).
  DWORD_PTR process_mask = 0;
  DWORD_PTR system_mask = 0;
  if (GetActiveProcessorGroupCount() <= 1 &&
      GetProcessAffinityMask(GetCurrentProcess(), &process_mask,
                             &system_mask) &&
      process_mask != 0) {
    return static_cast<int>(
        std::bitset<sizeof(DWORD_PTR) * 8>(process_mask).count());
  }
  return std::max<int>(
      1, static_cast<int>(GetActiveProcessorCount(ALL_PROCESSOR_GROUPS)));
}

PathKind StatPath(const std::string& path) {
  const DWORD attributes =
      GetFileAttributesW(platform::windows::Widen(path).c_str());
  if (attributes == INVALID_FILE_ATTRIBUTES) return PathKind::kMissing;
  if (attributes & FILE_ATTRIBUTE_DIRECTORY) return PathKind::kOther;
  // Windows has no execute bit: a program is an image Windows starts by
  // itself (.exe, .com); anything else (a .py script) runs through its
  // interpreter.
  const std::string ext = LowerExtension(path);
  return ext == ".exe" || ext == ".com" ? PathKind::kExecutableFile
                                        : PathKind::kPlainFile;
}

bool HasDirectory(const std::string& program) {
  return program.find_first_of("\\/:") != std::string::npos;
}

std::optional<int> SignalNumber(absl::string_view name) {
  // The signals Windows has an event for (platform/windows: Ctrl-C, Ctrl-Break,
  // the console closing, TerminateJobObject), by their Linux numbers.
  const int sig = platform::SignalNumber(std::string(name));
  if (sig < 0) return std::nullopt;
  return sig;
}

bool IsSignalNumber(int sig) {
  return sig == platform::kSignalHangup || sig == platform::kSignalInterrupt ||
         sig == platform::kSignalQuit || sig == platform::kSignalKill ||
         sig == platform::kSignalTerminate;
}

bool IsUncatchableSignal(int sig) { return sig == platform::kSignalKill; }

std::string LauncherPath() {
  std::wstring buffer(32768, L'\0');
  const DWORD n = GetModuleFileNameW(nullptr, buffer.data(),
                                     static_cast<DWORD>(buffer.size()));
  if (n == 0 || n >= buffer.size()) return "";
  buffer.resize(n);
  return platform::windows::Narrow(buffer);
}

void SetProcessEnv(const std::string& name, const std::string& value) {
  // _wputenv_s: the CRT's copy (getenv) and the process's (children) both.
  _wputenv_s(platform::windows::Widen(name).c_str(),
             platform::windows::Widen(value).c_str());
}

}  // namespace muster::platform::os
