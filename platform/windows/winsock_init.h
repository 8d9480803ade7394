// What the Windows side of platform's sockets and host facts (sockets, host
// facts) shares: Winsock started once per process, and the text of a Winsock
// error.
#ifndef MUSTER_PLATFORM_WINDOWS_WINSOCK_INIT_H_
#define MUSTER_PLATFORM_WINDOWS_WINSOCK_INIT_H_

#include <string>

namespace muster::platform {

// WSAStartup(2.2), once per process (never undone: sockets may live until
// exit). Thread-safe.
void EnsureWinsock();

// "No connection could be made because the target machine actively refused
// it. (error 10061)".
std::string WinsockErrorText(int error);

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_WINDOWS_WINSOCK_INIT_H_
