// Signal numbers as data. muster passes signals around as ints (the agent's
// --signals-to-handle, a worker killed by a signal, exit status 128+signal):
// these are Linux's numbers, which the Windows side maps to its own events
// (console Ctrl-C/Ctrl-Break, service stop, TerminateJobObject).
#ifndef MUSTER_PLATFORM_SIGNALS_H_
#define MUSTER_PLATFORM_SIGNALS_H_

#include <string>

namespace muster::platform {

inline constexpr int kSignalHangup = 1;
inline constexpr int kSignalInterrupt = 2;
inline constexpr int kSignalQuit = 3;
inline constexpr int kSignalKill = 9;
inline constexpr int kSignalTerminate = 15;

// "SIGTERM" for 15; "signal N" for a number the OS has no name for.
std::string SignalName(int signal);

// The number of a signal name ("TERM", "SIGTERM", "term"); -1 when unknown.
int SignalNumber(const std::string& name);

// How a process that exited by itself ended, for failure reports: "exited
// with code 3". On Windows a crash ends a process with an NTSTATUS as its exit
// code, which is named: "exited with code 0xC0000005 (STATUS_ACCESS_VIOLATION:
// an access violation)".
std::string DescribeExitCode(int exit_code);

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_SIGNALS_H_
