// Windows implementation of muster/platform/shared_memory.h.
//
// The region is a named file mapping backed by the paging file
// ("Local\muster-<pid>-<random>", this session only, the creator's default
// ACL). Windows removes the name with the last handle, so a crash leaves
// nothing behind; Unlink closes this process's handle (the views stay).
//
// Windows has no futex that works across processes (WaitOnAddress is for the
// threads of one process), so WaitOnWord sleeps for a short slice and returns
// (callers re-check their condition, as after a spurious wake-up) and WakeAll
// does nothing: the transport's spin and yield phases still find a word that
// changes quickly; a waiter that got to sleeping sees it about a millisecond
// later (more where the timer's resolution is coarser).
#include <windows.h>

#include <cstdio>
#include <random>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "muster/platform/shared_memory.h"
#include "platform/windows/win_util.h"

namespace muster::platform {
namespace {

using platform::windows::ErrorText;
using platform::windows::Narrow;
using platform::windows::Widen;

// The mapping handle of each region this process created or opened, by
// address of its view, until Unlink or destruction.
class Handles {
 public:
  void Put(void* view, HANDLE h) {
    absl::MutexLock lock(&mu_);
    map_[view] = h;
  }
  void Close(void* view) {
    absl::MutexLock lock(&mu_);
    auto it = map_.find(view);
    if (it == map_.end()) return;
    CloseHandle(it->second);
    map_.erase(it);
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<void*, HANDLE> map_ ABSL_GUARDED_BY(mu_);
};

Handles& GetHandles() {
  static Handles* handles = new Handles();
  return *handles;
}

absl::Status OsError(absl::StatusCode code, absl::string_view what,
                     const std::string& name, DWORD error) {
  return absl::Status(code, absl::StrCat(what, " shared memory ", name, ": ",
                                         ErrorText(error)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Create(
    const std::string& name, size_t bytes) {
  const uint64_t size = bytes;
  HANDLE h = CreateFileMappingW(INVALID_HANDLE_VALUE, nullptr,
                                PAGE_READWRITE | SEC_COMMIT,
                                static_cast<DWORD>(size >> 32),
                                static_cast<DWORD>(size), Widen(name).c_str());
  const DWORD error = GetLastError();
  if (h == nullptr) {
    return OsError(absl::StatusCode::kUnavailable, "creating", name, error);
  }
  if (error == ERROR_ALREADY_EXISTS) {
    CloseHandle(h);
    return OsError(absl::StatusCode::kAlreadyExists, "creating", name, error);
  }
  void* data = MapViewOfFile(h, FILE_MAP_ALL_ACCESS, 0, 0, bytes);
  if (data == nullptr) {
    const DWORD e = GetLastError();
    CloseHandle(h);
    return OsError(absl::StatusCode::kUnavailable, "mapping", name, e);
  }
  GetHandles().Put(data, h);
  // SEC_COMMIT pages of the paging file start zeroed.
  return std::unique_ptr<SharedRegion>(new SharedRegion(name, data, bytes));
}

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Open(
    const std::string& name, size_t bytes) {
  HANDLE h = OpenFileMappingW(FILE_MAP_ALL_ACCESS, FALSE, Widen(name).c_str());
  if (h == nullptr) {
    const DWORD e = GetLastError();
    return OsError(e == ERROR_FILE_NOT_FOUND ? absl::StatusCode::kNotFound
                                             : absl::StatusCode::kUnavailable,
                   "opening", name, e);
  }
  void* data = MapViewOfFile(h, FILE_MAP_ALL_ACCESS, 0, 0, 0);
  MEMORY_BASIC_INFORMATION info{};
  if (data == nullptr || VirtualQuery(data, &info, sizeof(info)) == 0 ||
      info.RegionSize < bytes) {
    const DWORD e = GetLastError();
    if (data != nullptr) UnmapViewOfFile(data);
    CloseHandle(h);
    if (data != nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("shared memory ", name, " has ", info.RegionSize,
                       " bytes, fewer than the ", bytes, " expected"));
    }
    return OsError(absl::StatusCode::kUnavailable, "mapping", name, e);
  }
  GetHandles().Put(data, h);
  return std::unique_ptr<SharedRegion>(new SharedRegion(name, data, bytes));
}

SharedRegion::~SharedRegion() {
  GetHandles().Close(data_);
  UnmapViewOfFile(data_);
}

void SharedRegion::Unlink() {
  if (unlinked_) return;
  unlinked_ = true;
  GetHandles().Close(data_);
}

void WaitOnWord(std::atomic<uint32_t>* word, uint32_t expected,
                absl::Duration timeout) {
  if (word->load(std::memory_order_acquire) != expected) return;
  if (timeout <= absl::ZeroDuration()) return;
  Sleep(timeout < absl::Milliseconds(1) ? 0 : 1);
}

void WakeAll(std::atomic<uint32_t>* /*word*/) {}

void YieldThread() { SwitchToThread(); }

bool ProcessExists(int64_t pid) {
  if (pid <= 0 || pid > UINT32_MAX) return false;
  platform::windows::UniqueHandle process(OpenProcess(
      PROCESS_QUERY_LIMITED_INFORMATION, FALSE, static_cast<DWORD>(pid)));
  if (!process.valid()) return GetLastError() == ERROR_ACCESS_DENIED;
  DWORD code = 0;
  return !GetExitCodeProcess(process.get(), &code) || code == STILL_ACTIVE;
}

// The DNS host name and the installation's MachineGuid (a cloned machine
// that kept its name still differs there).
std::string HostIdentity() {
  wchar_t name[256] = {};
  DWORD n = 255;
  if (!GetComputerNameExW(ComputerNameDnsHostname, name, &n)) name[0] = 0;
  wchar_t guid[64] = {};
  DWORD guid_bytes = sizeof(guid);
  if (RegGetValueW(HKEY_LOCAL_MACHINE, L"SOFTWARE\\Microsoft\\Cryptography",
                   L"MachineGuid", RRF_RT_REG_SZ, nullptr, guid,
                   &guid_bytes) != ERROR_SUCCESS) {
    guid[0] = 0;
  }
  return absl::StrCat(Narrow(name), "/", Narrow(guid));
}

std::string UniqueRegionName() {
  std::random_device device;
  const uint64_t bits =
      (static_cast<uint64_t>(device()) << 32) ^ static_cast<uint64_t>(device());
  return absl::StrFormat("Local\\muster-%d-%016x", GetCurrentProcessId(), bits);
}

}  // namespace muster::platform
