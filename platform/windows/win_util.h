// Small Win32 helpers shared by platform/windows: UTF-8 <-> UTF-16, the OS's
// error text, an owning HANDLE, the MSVCRT command-line quoting rules and the
// environment block CreateProcessW takes. Private to platform/windows.
#ifndef MUSTER_PLATFORM_WINDOWS_WIN_UTIL_H_
#define MUSTER_PLATFORM_WINDOWS_WIN_UTIL_H_

#include <windows.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace muster::platform::windows {

// Lossless for valid UTF-8 / UTF-16; invalid sequences become U+FFFD.
std::wstring Widen(absl::string_view utf8);
std::string Narrow(std::wstring_view utf16);

// "The system cannot find the file specified. (error 2)".
std::string ErrorText(DWORD error);
// ErrorText(GetLastError()).
std::string LastErrorText();

// Writes all of `data` to `h` (WriteFile until done). False on an error.
bool WriteAll(HANDLE h, absl::string_view data);

// Owns a kernel handle (INVALID_HANDLE_VALUE and nullptr both mean none).
class UniqueHandle {
 public:
  UniqueHandle() = default;
  explicit UniqueHandle(HANDLE h) : h_(h) {}
  ~UniqueHandle() { reset(); }
  UniqueHandle(UniqueHandle&& o) noexcept : h_(o.release()) {}
  UniqueHandle& operator=(UniqueHandle&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;

  HANDLE get() const { return h_; }
  bool valid() const { return h_ != nullptr && h_ != INVALID_HANDLE_VALUE; }
  HANDLE release() {
    HANDLE h = h_;
    h_ = nullptr;
    return h;
  }
  void reset(HANDLE h = nullptr) {
    if (valid()) CloseHandle(h_);
    h_ = h;
  }

 private:
  HANDLE h_ = nullptr;
};

// Quotes one argument so that the MSVCRT (and CommandLineToArgvW) parser
// gives it back unchanged: no quotes when it has no space, tab, newline or
// quote and is not empty; otherwise "..." with each '"' escaped as \" and the
// backslashes before a '"' (or before the closing quote) doubled.
std::wstring QuoteArgument(std::wstring_view arg);

// argv joined into a command line with QuoteArgument. argv[0] is quoted the
// same way (CreateProcessW parses the program name by simpler rules, which
// a quoted name without '"' inside satisfies).
std::wstring BuildCommandLine(const std::vector<std::string>& argv);

// The double-NUL-terminated UTF-16 block of "NAME=value" entries, sorted by
// name without regard to case as CreateProcessW requires.
std::wstring EnvironmentBlock(const std::map<std::string, std::string>& env);

}  // namespace muster::platform::windows

#endif  // MUSTER_PLATFORM_WINDOWS_WIN_UTIL_H_
