// Windows implementation of muster/platform/locked_file.h.
//
// MappedFile: CreateFileW + CreateFileMappingW + MapViewOfFile.
//
// LockedFile: Windows byte-range locks (LockFileEx) are mandatory, so the
// lock is taken on one byte far past the end of the file (kLockByte), never
// on the contents: readers and writers of the contents are never refused by
// the lock itself. Windows cannot say who holds a byte-range lock, so each
// holder also holds a shared lock on a byte of its own, kMarkBase + its
// process id, for as long as it holds the store lock; LockHolders() walks the
// process list and tries each process's byte (an exclusive try that fails
// means that process holds the lock). A process that dies loses both locks
// (the OS drops them with its handles).
//
// Windows file semantics met here, and what is done about them:
//  * Another program (an editor, a backup or virus scanner) may have the file
//    open without sharing: open fails with ERROR_SHARING_VIOLATION; the error
//    says so and names the path.
//  * A lock held by a live process that hangs would block the store forever:
//    Lock gives up after MUSTER_FILE_STORE_LOCK_TIMEOUT seconds (default 60)
//    with an error naming the holders.
//  * A deleted file's name may stay until its last handle closes ("delete
//    pending": opening it then fails with ERROR_ACCESS_DENIED; Windows 10
//    1903 and later delete with POSIX semantics on NTFS, the name goes at
//    once): Open retries access-denied for 2 s.
// clang-format off
#include <windows.h>
#include <tlhelp32.h>  // After windows.h, whose types it uses.
// clang-format on

#include <algorithm>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "muster/platform/locked_file.h"
#include "platform/windows/win_util.h"

namespace muster::platform {
namespace {

using platform::windows::ErrorText;
using platform::windows::LastErrorText;
using platform::windows::Narrow;
using platform::windows::Widen;

constexpr uint64_t kLockByte = uint64_t{1} << 62;
constexpr uint64_t kMarkBase = uint64_t{1} << 61;

HANDLE H(intptr_t handle) { return reinterpret_cast<HANDLE>(handle); }

OVERLAPPED At(uint64_t offset) {
  OVERLAPPED o{};
  o.Offset = static_cast<DWORD>(offset);
  o.OffsetHigh = static_cast<DWORD>(offset >> 32);
  return o;
}

bool LockByte(HANDLE h, uint64_t offset, DWORD flags) {
  OVERLAPPED o = At(offset);
  return LockFileEx(h, flags, 0, 1, 0, &o) != 0;
}

void UnlockByte(HANDLE h, uint64_t offset) {
  OVERLAPPED o = At(offset);
  UnlockFileEx(h, 0, 1, 0, &o);
}

absl::Duration LockPatience() {
  double seconds = 60;
  if (const char* env = std::getenv("MUSTER_FILE_STORE_LOCK_TIMEOUT")) {
    double value = 0;
    if (absl::SimpleAtod(env, &value) && value > 0) seconds = value;
  }
  return absl::Seconds(seconds);
}

bool IsDrivePath(absl::string_view p) {
  return p.size() >= 3 && absl::ascii_isalpha(p[0]) && p[1] == ':' &&
         (p[2] == '/' || p[2] == '\\');
}

}  // namespace

std::string AbsolutePathFromUri(absl::string_view address) {
  if (!address.empty() && address[0] == '/' && IsDrivePath(address.substr(1))) {
    address.remove_prefix(1);
  }
  return IsDrivePath(address) ? std::string(address) : "";
}

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Create(
    const std::string& path, absl::string_view contents,
    absl::string_view what) {
  platform::windows::UniqueHandle file(
      CreateFileW(Widen(path).c_str(), GENERIC_READ | GENERIC_WRITE,
                  FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                  nullptr, CREATE_ALWAYS, FILE_ATTRIBUTE_NORMAL, nullptr));
  if (!file.valid()) {
    return absl::UnavailableError(
        absl::StrCat("cannot create ", what, " ", path, ": ", LastErrorText()));
  }
  DWORD written = 0;
  if (!WriteFile(file.get(), contents.data(),
                 static_cast<DWORD>(contents.size()), &written, nullptr) ||
      written != contents.size()) {
    return absl::UnavailableError(
        absl::StrCat("cannot write ", what, " ", path, ": ", LastErrorText()));
  }
  platform::windows::UniqueHandle mapping(
      CreateFileMappingW(file.get(), nullptr, PAGE_READWRITE, 0,
                         static_cast<DWORD>(contents.size()), nullptr));
  void* view = mapping.valid() ? MapViewOfFile(mapping.get(), FILE_MAP_WRITE, 0,
                                               0, contents.size())
                               : nullptr;
  if (view == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot map ", what, " ", path, ": ", LastErrorText()));
  }
  // The view keeps the mapping and the file alive.
  return std::unique_ptr<MappedFile>(
      new MappedFile(static_cast<char*>(view), contents.size()));
}

MappedFile::~MappedFile() { UnmapViewOfFile(data_); }

absl::StatusOr<std::unique_ptr<LockedFile>> LockedFile::Open(
    const std::string& path, absl::string_view what) {
  const std::wstring wide = Widen(path);
  const absl::Time give_up = absl::Now() + absl::Seconds(2);
  while (true) {
    HANDLE h =
        // No DELETE access: others (a text editor, `type`) could then open
        // the file only with FILE_SHARE_DELETE, which most programs omit.
        CreateFileW(wide.c_str(), GENERIC_READ | GENERIC_WRITE,
                    FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                    nullptr, OPEN_ALWAYS, FILE_ATTRIBUTE_NORMAL, nullptr);
    if (h != INVALID_HANDLE_VALUE) {
      return std::unique_ptr<LockedFile>(
          new LockedFile(path, reinterpret_cast<intptr_t>(h)));
    }
    const DWORD error = GetLastError();
    if (error == ERROR_ACCESS_DENIED && absl::Now() < give_up) {
      // Most likely the previous run's file, deleted but still open
      // somewhere (delete pending): its name goes when that handle closes.
      Sleep(20);
      continue;
    }
    std::string hint;
    if (error == ERROR_SHARING_VIOLATION || error == ERROR_LOCK_VIOLATION) {
      hint =
          " (another program has it open without sharing it: an editor, a "
          "backup or virus scanner; close it, or give file:// another path)";
    } else if (error == ERROR_ACCESS_DENIED) {
      hint =
          " (a directory, a read-only file, or a file being deleted that "
          "another process still has open)";
    }
    return absl::UnavailableError(absl::StrCat("cannot open ", what, " ", path,
                                               ": ", ErrorText(error), hint));
  }
}

LockedFile::~LockedFile() { CloseHandle(H(handle_)); }

absl::Status LockedFile::Lock(Mode mode) {
  const DWORD flags = LOCKFILE_FAIL_IMMEDIATELY |
                      (mode == Mode::kExclusive ? LOCKFILE_EXCLUSIVE_LOCK : 0);
  const absl::Duration patience = LockPatience();
  const absl::Time start = absl::Now();
  DWORD sleep_ms = 1;
  while (!LockByte(H(handle_), kLockByte, flags)) {
    const DWORD error = GetLastError();
    if (error != ERROR_LOCK_VIOLATION && error != ERROR_IO_PENDING) {
      return absl::UnavailableError(
          absl::StrCat("LockFileEx ", path_, ": ", ErrorText(error)));
    }
    if (absl::Now() - start >= patience) {
      const std::vector<std::string> holders = LockHolders();
      std::string who = "another process";
      if (!holders.empty()) {
        who.clear();
        for (const std::string& h : holders) {
          absl::StrAppend(&who, who.empty() ? "" : ", ", h);
        }
      }
      return absl::UnavailableError(absl::StrCat(
          path_, " is locked by ", who, " and was not released within ",
          absl::FormatDuration(patience),
          " (a hung rank of this or another job?): stop that process, or give "
          "file:// another path (MUSTER_FILE_STORE_LOCK_TIMEOUT sets the "
          "wait)"));
    }
    Sleep(sleep_ms);
    sleep_ms = std::min<DWORD>(sleep_ms * 2, 50);
  }
  // This process's mark (shared: several handles of one process may hold it).
  LockByte(H(handle_), kMarkBase + GetCurrentProcessId(),
           LOCKFILE_FAIL_IMMEDIATELY);
  return absl::OkStatus();
}

void LockedFile::Unlock() {
  UnlockByte(H(handle_), kMarkBase + GetCurrentProcessId());
  UnlockByte(H(handle_), kLockByte);
}

absl::StatusOr<std::string> LockedFile::ReadAll() {
  LARGE_INTEGER size{};
  if (!GetFileSizeEx(H(handle_), &size)) {
    return absl::UnavailableError(
        absl::StrCat("GetFileSizeEx ", path_, ": ", LastErrorText()));
  }
  std::string text(static_cast<size_t>(size.QuadPart), '\0');
  size_t done = 0;
  while (done < text.size()) {
    OVERLAPPED o = At(done);
    DWORD got = 0;
    if (!ReadFile(H(handle_), text.data() + done,
                  static_cast<DWORD>(text.size() - done), &got, &o) ||
        got == 0) {
      break;
    }
    done += got;
  }
  text.resize(done);
  return text;
}

absl::Status LockedFile::WriteAll(absl::string_view text) {
  size_t done = 0;
  while (done < text.size()) {
    OVERLAPPED o = At(done);
    DWORD wrote = 0;
    if (!WriteFile(H(handle_), text.data() + done,
                   static_cast<DWORD>(text.size() - done), &wrote, &o) ||
        wrote == 0) {
      return absl::UnavailableError(
          absl::StrCat("write ", path_, ": ", LastErrorText()));
    }
    done += wrote;
  }
  LARGE_INTEGER end{};
  end.QuadPart = static_cast<LONGLONG>(text.size());
  if (!SetFilePointerEx(H(handle_), end, nullptr, FILE_BEGIN) ||
      !SetEndOfFile(H(handle_))) {
    return absl::UnavailableError(
        absl::StrCat("truncate ", path_, ": ", LastErrorText()));
  }
  return absl::OkStatus();
}

void LockedFile::Remove() {
  // Every rank opens the file with FILE_SHARE_DELETE, so this succeeds while
  // they have it open. Since Windows 10 1903 (NTFS) the name goes at once;
  // before, it stays until the last handle closes (see Open).
  DeleteFileW(Widen(path_).c_str());
}

std::vector<std::string> LockedFile::LockHolders() const {
  std::vector<std::string> out;
  platform::windows::UniqueHandle snapshot(
      CreateToolhelp32Snapshot(TH32CS_SNAPPROCESS, 0));
  if (!snapshot.valid()) return out;
  PROCESSENTRY32W entry{};
  entry.dwSize = sizeof(entry);
  for (BOOL more = Process32FirstW(snapshot.get(), &entry); more;
       more = Process32NextW(snapshot.get(), &entry)) {
    const uint64_t mark = kMarkBase + entry.th32ProcessID;
    if (LockByte(H(handle_), mark,
                 LOCKFILE_FAIL_IMMEDIATELY | LOCKFILE_EXCLUSIVE_LOCK)) {
      UnlockByte(H(handle_), mark);
      continue;
    }
    out.push_back(absl::StrCat("pid ", entry.th32ProcessID, " (",
                               Narrow(entry.szExeFile), ")"));
  }
  return out;
}

}  // namespace muster::platform
