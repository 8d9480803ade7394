#include "platform/windows/winsock_init.h"

// clang-format off
// winsock2.h before windows.h (which would bring the old winsock.h).
#include <winsock2.h>
#include <windows.h>
// clang-format on

#include <mutex>

#include "platform/windows/win_util.h"

namespace muster::platform {

void EnsureWinsock() {
  static std::once_flag once;
  std::call_once(once, [] {
    WSADATA data;
    WSAStartup(MAKEWORD(2, 2), &data);
  });
}

std::string WinsockErrorText(int error) {
  return platform::windows::ErrorText(static_cast<DWORD>(error));
}

}  // namespace muster::platform
