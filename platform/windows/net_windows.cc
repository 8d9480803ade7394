// SystemNet() on Windows: a stub for the Windows port (the next issue), not
// built on Linux. Each method of platform::Net maps onto one Win32 call:
//   Interfaces()    GetAdaptersAddresses (OperStatus for running, IfType
//                   IF_TYPE_SOFTWARE_LOOPBACK for loopback, OnLinkPrefixLength)
//   Hostname()      GetComputerNameExA(ComputerNameDnsHostname)
//   Resolve()       GetAddrInfoW on a detached thread, as on Linux
//   RouteSource()   GetBestRoute2, or a UDP connect + getsockname
//   TcpSockets()    GetExtendedTcpTable(TCP_TABLE_OWNER_PID_ALL) for IPv4 and
//                   IPv6, the owner's command line from
//                   QueryFullProcessImageNameW
//   TryBind()       bind() with SO_EXCLUSIVEADDRUSE off, WSAEADDRINUSE mapped
//                   to EADDRINUSE (net.h speaks <cerrno> names)
//   Connect()       a non-blocking connect and select(); Windows gives no ICMP
//                   error queue: WSAECONNREFUSED maps to ECONNREFUSED, a
//                   timeout to timed_out (so REJECT reads as filtered there)
#include "muster/platform/net.h"

namespace muster::platform {

// Declared in net.h; defined here by the Windows port.
Net& SystemNet();

}  // namespace muster::platform
