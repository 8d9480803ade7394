// Windows implementation of muster/platform/dynamic_library.h: LoadLibraryW,
// GetProcAddress, GetModuleHandleExW; the token's elevation.
#include <windows.h>

#include "muster/platform/dynamic_library.h"
#include "platform/windows/win_util.h"

namespace muster::platform {

absl::StatusOr<DynamicLibrary> DynamicLibrary::Load(const std::string& name) {
  HMODULE module = LoadLibraryW(windows::Widen(name).c_str());
  if (module == nullptr) {
    return absl::NotFoundError(name + ": " + windows::LastErrorText());
  }
  return DynamicLibrary(reinterpret_cast<void*>(module));
}

void* DynamicLibrary::Symbol(const char* symbol) const {
  return reinterpret_cast<void*>(
      GetProcAddress(static_cast<HMODULE>(handle_), symbol));
}

std::string LibraryPathOf(const void* address) {
  HMODULE module = nullptr;
  if (address == nullptr ||
      !GetModuleHandleExW(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS |
                              GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
                          static_cast<LPCWSTR>(address), &module)) {
    return "";
  }
  wchar_t path[MAX_PATH];
  const DWORD n = GetModuleFileNameW(module, path, MAX_PATH);
  return n == 0 ? "" : windows::Narrow(std::wstring(path, n));
}

bool RunningAsAdministrator() {
  HANDLE token = nullptr;
  if (!OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &token)) return false;
  TOKEN_ELEVATION elevation{};
  DWORD size = 0;
  const bool elevated = GetTokenInformation(token, TokenElevation, &elevation,
                                            sizeof(elevation), &size) &&
                        elevation.TokenIsElevated != 0;
  CloseHandle(token);
  return elevated;
}

}  // namespace muster::platform
