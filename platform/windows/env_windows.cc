// The environment on Windows: variables in UTF-16 (read as UTF-8), PATH
// lookup with PATHEXT as cmd.exe does it, process facts.
#include <windows.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "muster/platform/env.h"
#include "platform/windows/spawn_windows.h"
#include "platform/windows/win_util.h"

namespace muster::platform {
namespace {

using windows::Narrow;
using windows::Widen;

// What cmd.exe uses when PATHEXT is unset.
constexpr char kDefaultPathExt[] = ".COM;.EXE;.BAT;.CMD";

enum class Kind { kMissing, kFile, kDirectory };

Kind Lookup(const std::string& path) {
  const DWORD a = GetFileAttributesW(Widen(path).c_str());
  if (a == INVALID_FILE_ATTRIBUTES) return Kind::kMissing;
  return (a & FILE_ATTRIBUTE_DIRECTORY) ? Kind::kDirectory : Kind::kFile;
}

bool HasPathSeparator(absl::string_view name) {
  return name.find_first_of("\\/:") != absl::string_view::npos;
}

// The extension of the last component, with its dot ("" when none).
std::string Extension(absl::string_view path) {
  const size_t slash = path.find_last_of("\\/:");
  const size_t dot = path.rfind('.');
  if (dot == absl::string_view::npos ||
      (slash != absl::string_view::npos && dot < slash)) {
    return "";
  }
  return std::string(path.substr(dot));
}

std::vector<std::string> PathExtensions() {
  std::string exts = GetEnv("PATHEXT").value_or(kDefaultPathExt);
  std::vector<std::string> out;
  for (absl::string_view e : absl::StrSplit(exts, ';', absl::SkipEmpty())) {
    out.push_back(absl::AsciiStrToLower(e));
  }
  // A Python script is a program for muster (it runs it with python.exe).
  if (std::find(out.begin(), out.end(), ".py") == out.end()) {
    out.push_back(".py");
  }
  return out;
}

// The files `base` may name, in the order cmd.exe tries them: itself when it
// has an extension, then with each PATHEXT extension.
std::vector<std::string> Candidates(const std::string& base,
                                    const std::vector<std::string>& exts) {
  std::vector<std::string> out;
  const bool has_extension = !Extension(base).empty();
  if (has_extension) out.push_back(base);
  for (const std::string& e : exts) out.push_back(base + e);
  // Last, the name as it is: a program image without an extension runs, and
  // a script without one gets an error that says what it is.
  if (!has_extension) out.push_back(base);
  return out;
}

// The system directories CreateProcessW searches after the PATH.
std::string SystemPath() {
  wchar_t sys[MAX_PATH];
  wchar_t win[MAX_PATH];
  const UINT a = GetSystemDirectoryW(sys, MAX_PATH);
  const UINT b = GetWindowsDirectoryW(win, MAX_PATH);
  return absl::StrCat(Narrow(std::wstring_view(sys, a)), ";",
                      Narrow(std::wstring_view(win, b)));
}

}  // namespace

std::optional<std::string> GetEnv(const std::string& name) {
  const std::wstring wname = Widen(name);
  SetLastError(ERROR_SUCCESS);
  DWORD n = GetEnvironmentVariableW(wname.c_str(), nullptr, 0);
  if (n == 0) {
    if (GetLastError() == ERROR_ENVVAR_NOT_FOUND) return std::nullopt;
    return std::string();
  }
  std::wstring value(n, L'\0');
  n = GetEnvironmentVariableW(wname.c_str(), value.data(), n);
  value.resize(n);
  return Narrow(value);
}

std::map<std::string, std::string> CurrentEnvironment() {
  std::map<std::string, std::string> env;
  wchar_t* block = GetEnvironmentStringsW();
  if (block == nullptr) return env;
  for (const wchar_t* e = block; *e != L'\0'; e += wcslen(e) + 1) {
    const std::string entry = Narrow(e);
    const size_t eq = entry.find('=');
    // "=C:=C:\dir" entries (cmd.exe's per-drive directories) are not
    // variables.
    if (eq == std::string::npos || eq == 0) continue;
    env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  FreeEnvironmentStringsW(block);
  return env;
}

absl::StatusOr<std::string> FindExecutable(const std::string& argv0,
                                           const std::string& path_env) {
  if (argv0.empty())
    return absl::InvalidArgumentError("the program name is empty");
  const std::vector<std::string> exts = PathExtensions();
  if (HasPathSeparator(argv0)) {
    for (const std::string& c : Candidates(argv0, exts)) {
      const Kind k = Lookup(c);
      if (k == Kind::kFile) return windows::CheckRunnable(argv0, c);
      if (k == Kind::kDirectory && c == argv0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "'", argv0,
            "' is a directory, not a program; give the program's path"));
      }
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "program '", argv0, "' not found: no such file (also tried ",
        absl::StrJoin(exts, ", "), "); check the path and the spelling"));
  }
  const std::string path = path_env.empty()
                               ? SystemPath()
                               : absl::StrCat(path_env, ";", SystemPath());
  std::string only_dir;
  for (absl::string_view dir : absl::StrSplit(path, ';', absl::SkipEmpty())) {
    const std::string base = absl::StrCat(
        dir, (dir.back() == '\\' || dir.back() == '/') ? "" : "\\", argv0);
    for (const std::string& c : Candidates(base, exts)) {
      const Kind k = Lookup(c);
      if (k == Kind::kFile) return windows::CheckRunnable(argv0, c);
      if (k == Kind::kDirectory && only_dir.empty()) only_dir = c;
    }
  }
  std::string why =
      absl::StrCat("program '", argv0, "' not found in PATH (", path,
                   ") with PATHEXT (", absl::StrJoin(exts, ";"), ")");
  if (!only_dir.empty())
    absl::StrAppend(&why, ": only a directory '", only_dir, "'");
  return absl::FailedPreconditionError(
      absl::StrCat(why, "; give a path, or check the spelling"));
}

int ProcessId() { return static_cast<int>(GetCurrentProcessId()); }

std::vector<int> CurrentCpuAffinity() {
  std::vector<int> cpus;
  DWORD_PTR process_mask = 0;
  DWORD_PTR system_mask = 0;
  if (!GetProcessAffinityMask(GetCurrentProcess(), &process_mask,
                              &system_mask)) {
    return cpus;
  }
  for (int cpu = 0; cpu < static_cast<int>(8 * sizeof(DWORD_PTR)); ++cpu) {
    if (process_mask & (static_cast<DWORD_PTR>(1) << cpu)) cpus.push_back(cpu);
  }
  return cpus;
}

void WriteToStderr(absl::string_view text) {
  HANDLE h = GetStdHandle(STD_ERROR_HANDLE);
  if (h != nullptr && h != INVALID_HANDLE_VALUE) windows::WriteAll(h, text);
}

// Windows has no SIGPIPE: a write to a closed pipe fails with
// ERROR_NO_DATA / EPIPE already.
void IgnoreBrokenPipes() {}

}  // namespace muster::platform
