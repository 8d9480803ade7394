// Files on Windows: replace-by-rename with MoveFileExW, file kinds from the
// attributes and the handle type, LockFileEx locks whose conflicts name the
// holder.
#include <windows.h>
// (after windows.h)
#include <io.h>
#include <restartmanager.h>

#include <atomic>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "muster/platform/files.h"
#include "platform/src/replaceable.h"
#include "platform/windows/win_util.h"

namespace muster::platform {
namespace {

using windows::ErrorText;
using windows::LastErrorText;
using windows::Narrow;
using windows::UniqueHandle;
using windows::Widen;

// The lock covers one byte far beyond any real end of file, so that the
// bytes at the start (the holder's process id and name) stay readable for
// the one who finds the file locked. Windows allows locking past the end.
constexpr DWORD kLockOffsetHigh = 0x40000000;

// Whether a MoveFileExW failure is someone else having the target open
// without FILE_SHARE_DELETE (a reader, an antivirus scan): worth a retry.
bool IsSharingError(DWORD e) {
  return e == ERROR_ACCESS_DENIED || e == ERROR_SHARING_VIOLATION ||
         e == ERROR_LOCK_VIOLATION;
}

// The processes that have `path` open, as the Restart Manager sees them:
// "process 1234 (musterd.exe), ...". Empty when it cannot tell.
std::string HoldersByRestartManager(const std::string& path) {
  DWORD session = 0;
  WCHAR key[CCH_RM_SESSION_KEY + 1] = {};
  if (RmStartSession(&session, 0, key) != ERROR_SUCCESS) return "";
  std::vector<std::string> names;
  std::wstring wpath = Widen(path);
  LPCWSTR files[] = {wpath.c_str()};
  if (RmRegisterResources(session, 1, files, 0, nullptr, 0, nullptr) ==
      ERROR_SUCCESS) {
    UINT needed = 0;
    UINT count = 16;
    RM_PROCESS_INFO info[16];
    DWORD reasons = 0;
    if (RmGetList(session, &needed, &count, info, &reasons) == ERROR_SUCCESS) {
      for (UINT i = 0; i < count && i < 16; ++i) {
        names.push_back(absl::StrCat("process ", info[i].Process.dwProcessId,
                                     " (", Narrow(info[i].strAppName), ")"));
      }
    }
  }
  RmEndSession(session);
  return absl::StrJoin(names, ", ");
}

// Who holds the lock on `path`: what the holder wrote at its start, else the
// Restart Manager's answer.
std::string LockHolder(const std::string& path) {
  UniqueHandle h(
      CreateFileW(Widen(path).c_str(), GENERIC_READ,
                  FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                  nullptr, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, nullptr));
  if (h.valid()) {
    char buf[512];
    DWORD n = 0;
    if (ReadFile(h.get(), buf, sizeof(buf), &n, nullptr) && n > 0) {
      std::string text(buf, n);
      text = text.substr(0, text.find('\n'));
      if (!text.empty()) return text;
    }
  }
  return HoldersByRestartManager(path);
}

std::string ThisProcess() {
  wchar_t exe[MAX_PATH];
  const DWORD n = GetModuleFileNameW(nullptr, exe, MAX_PATH);
  return absl::StrCat(
      "process ", GetCurrentProcessId(), " (",
      Narrow(std::filesystem::path(std::wstring(exe, n)).filename().wstring()),
      ")");
}

}  // namespace

std::string DescribeNonRegularFile(const std::string& path) {
  const std::wstring w = Widen(path);
  const DWORD a = GetFileAttributesW(w.c_str());
  if (a != INVALID_FILE_ATTRIBUTES) {
    if (a & FILE_ATTRIBUTE_REPARSE_POINT) return "a symbolic link";
    if (a & FILE_ATTRIBUTE_DIRECTORY) return "a directory";
  }
  // Devices (NUL, CON, COM1, \\.\pipe\x) may have no attributes at all: ask
  // the handle what it is.
  UniqueHandle h(CreateFileW(
      w.c_str(), 0, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
      nullptr, OPEN_EXISTING,
      FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OPEN_REPARSE_POINT, nullptr));
  if (!h.valid()) return "";
  switch (GetFileType(h.get())) {
    case FILE_TYPE_DISK:
      return "";
    case FILE_TYPE_CHAR:
      return "a character device";
    case FILE_TYPE_PIPE:
      return "a FIFO";
    default:
      return "not a regular file";
  }
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents, int /*mode*/,
                                 Durability durability) {
  const bool durable = durability == Durability::kDurable;
  if (absl::Status ok = internal::CheckReplaceable(path); !ok.ok()) return ok;
  static std::atomic<int> seq{0};
  const std::string tmp =
      absl::StrCat(path, ".tmp.", GetCurrentProcessId(), ".", seq++);
  // CREATE_NEW: never write through something already there.
  UniqueHandle h(CreateFileW(Widen(tmp).c_str(), GENERIC_WRITE, 0, nullptr,
                             CREATE_NEW, FILE_ATTRIBUTE_NORMAL, nullptr));
  if (!h.valid()) {
    return absl::InternalError(
        absl::StrCat("cannot create ", tmp, ": ", LastErrorText()));
  }
  size_t done = 0;
  DWORD error = 0;
  while (done < contents.size()) {
    DWORD n = 0;
    const DWORD chunk =
        static_cast<DWORD>(std::min<size_t>(contents.size() - done, 1 << 24));
    if (!WriteFile(h.get(), contents.data() + done, chunk, &n, nullptr) ||
        n == 0) {
      error = GetLastError();
      break;
    }
    done += n;
  }
  // On the disk before the rename makes it visible: a crash leaves the old
  // file or the whole new one.
  if (durable && error == 0 && !FlushFileBuffers(h.get())) {
    error = GetLastError();
  }
  h.reset();
  const std::wstring wtmp = Widen(tmp);
  if (error != 0) {
    DeleteFileW(wtmp.c_str());
    return absl::InternalError(
        absl::StrCat("cannot write ", tmp, ": ", ErrorText(error)));
  }
  if (std::string what = DescribeNonRegularFile(path); !what.empty()) {
    DeleteFileW(wtmp.c_str());
    return absl::FailedPreconditionError(
        absl::StrCat(path, " became ", what, "; not replacing it"));
  }
  // A reader that opened the old file without FILE_SHARE_DELETE blocks the
  // rename for as long as it reads: retry for about a second.
  const absl::Time deadline = absl::Now() + absl::Seconds(1);
  const DWORD move_flags =
      MOVEFILE_REPLACE_EXISTING | (durable ? MOVEFILE_WRITE_THROUGH : 0);
  while (!MoveFileExW(wtmp.c_str(), Widen(path).c_str(), move_flags)) {
    error = GetLastError();
    if (!IsSharingError(error) || absl::Now() >= deadline) {
      DeleteFileW(wtmp.c_str());
      std::string holders =
          IsSharingError(error) ? HoldersByRestartManager(path) : "";
      return absl::InternalError(absl::StrCat(
          "cannot rename ", tmp, " to ", path, ": ", ErrorText(error),
          holders.empty() ? "" : absl::StrCat("; it is open in ", holders)));
    }
    Sleep(20);
  }
  return absl::OkStatus();
}

std::optional<absl::Time> ModificationTime(const std::string& path) {
  WIN32_FILE_ATTRIBUTE_DATA data;
  if (!GetFileAttributesExW(Widen(path).c_str(), GetFileExInfoStandard,
                            &data)) {
    return std::nullopt;
  }
  // 100 ns ticks since 1601-01-01.
  const int64_t ticks =
      (static_cast<int64_t>(data.ftLastWriteTime.dwHighDateTime) << 32) |
      data.ftLastWriteTime.dwLowDateTime;
  constexpr int64_t kUnixEpochTicks = 116444736000000000LL;
  return absl::FromUnixNanos((ticks - kUnixEpochTicks) * 100);
}

absl::StatusOr<std::string> MakeTempDirectory(const std::string& prefix,
                                              const std::string& parent) {
  std::string base = parent;
  if (base.empty()) {
    wchar_t buf[MAX_PATH + 1];
    const DWORD n = GetTempPathW(MAX_PATH + 1, buf);
    base = Narrow(std::wstring_view(buf, n));
  }
  if (!base.empty() && base.back() != '\\' && base.back() != '/') base += '\\';
  // The per-user temporary directory's ACL (inherited) keeps it private.
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  LARGE_INTEGER seed;
  QueryPerformanceCounter(&seed);
  uint64_t x = static_cast<uint64_t>(seed.QuadPart) ^
               (static_cast<uint64_t>(GetCurrentProcessId()) << 32);
  std::string path;
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string suffix;
    for (int i = 0; i < 6; ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      suffix.push_back(kChars[(x >> 33) % 36]);
    }
    path = absl::StrCat(base, prefix, suffix);
    if (CreateDirectoryW(Widen(path).c_str(), nullptr)) return path;
    if (GetLastError() != ERROR_ALREADY_EXISTS) break;
  }
  return absl::InternalError(absl::StrCat("cannot create ", base, prefix,
                                          "XXXXXX: ", LastErrorText()));
}

absl::Status MakePrivateDirectory(const std::string& path) {
  // The directory inherits its parent's ACL (the log directory's, private to
  // the user as MakeTempDirectory's is).
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(Widen(path)), ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create ", path, ": ", ec.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<FileLock>> FileLock::TryLock(
    const std::string& path) {
  UniqueHandle h(
      CreateFileW(Widen(path).c_str(), GENERIC_READ | GENERIC_WRITE,
                  FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                  nullptr, OPEN_ALWAYS, FILE_ATTRIBUTE_NORMAL, nullptr));
  if (!h.valid()) {
    return absl::InternalError(
        absl::StrCat("cannot open ", path, ": ", LastErrorText()));
  }
  OVERLAPPED ov{};
  ov.OffsetHigh = kLockOffsetHigh;
  if (!LockFileEx(h.get(), LOCKFILE_EXCLUSIVE_LOCK | LOCKFILE_FAIL_IMMEDIATELY,
                  0, 1, 0, &ov)) {
    const DWORD error = GetLastError();
    h.reset();
    if (error == ERROR_LOCK_VIOLATION || error == ERROR_IO_PENDING) {
      const std::string holder = LockHolder(path);
      return absl::UnavailableError(absl::StrCat(
          path, " is locked by ", holder.empty() ? "another process" : holder));
    }
    return absl::InternalError(
        absl::StrCat("cannot lock ", path, ": ", ErrorText(error)));
  }
  // Say who holds it, for the next one who finds it locked.
  const std::string me = ThisProcess() + "\n";
  DWORD n = 0;
  SetFilePointer(h.get(), 0, nullptr, FILE_BEGIN);
  SetEndOfFile(h.get());
  WriteFile(h.get(), me.data(), static_cast<DWORD>(me.size()), &n, nullptr);
  // FileLock keeps a C runtime descriptor (files.h stores an int); closing it
  // closes the handle, which releases the lock.
  const int fd = _open_osfhandle(reinterpret_cast<intptr_t>(h.get()), 0);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot lock ", path, ": no descriptor for its handle"));
  }
  h.release();
  return std::unique_ptr<FileLock>(new FileLock(fd));
}

FileLock::~FileLock() { _close(handle_); }

}  // namespace muster::platform
