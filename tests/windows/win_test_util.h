// Helpers for the Windows platform tests (run under wine): the helper
// program's path, files, and polling with a deadline.
#ifndef MUSTER_TESTS_WINDOWS_WIN_TEST_UTIL_H_
#define MUSTER_TESTS_WINDOWS_WIN_TEST_UTIL_H_

#include <windows.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "platform/windows/win_util.h"

namespace muster::wintest {

// The program `name` beside the test executable (bin/).
inline std::string BesideTest(const wchar_t* name) {
  wchar_t exe[MAX_PATH];
  const DWORD n = GetModuleFileNameW(nullptr, exe, MAX_PATH);
  std::filesystem::path p(std::wstring(exe, n));
  return platform::windows::Narrow((p.parent_path() / name).wstring());
}

// win_test_helper.exe, beside the test executable.
inline std::string HelperPath() { return BesideTest(L"win_test_helper.exe"); }

inline std::string ReadText(const std::string& path) {
  std::ifstream in(std::filesystem::path(platform::windows::Widen(path)),
                   std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Polls `done` every 50 ms until it is true or `timeout` passed.
inline bool WaitUntil(const std::function<bool()>& done,
                      absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return true;
}

// A fresh directory under the temporary directory, removed at the end.
class TempDir {
 public:
  TempDir() {
    wchar_t buf[MAX_PATH + 1];
    GetTempPathW(MAX_PATH + 1, buf);
    static int seq = 0;
    path_ = std::filesystem::path(buf) /
            (L"muster-wintest-" + std::to_wstring(GetCurrentProcessId()) +
             L"-" + std::to_wstring(seq++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  // `name` inside it.
  std::string operator/(const std::string& name) const {
    return platform::windows::Narrow(
        (path_ / platform::windows::Widen(name)).wstring());
  }
  std::string path() const {
    return platform::windows::Narrow(path_.wstring());
  }

 private:
  std::filesystem::path path_;
};

}  // namespace muster::wintest

#endif  // MUSTER_TESTS_WINDOWS_WIN_TEST_UTIL_H_
