// The one queue of stop requests of a Windows process: filled by the console
// control handler and by the service control handler (service_host_windows),
// emptied by StopRequests. Private to platform/windows.
#ifndef MUSTER_PLATFORM_WINDOWS_STOP_POST_H_
#define MUSTER_PLATFORM_WINDOWS_STOP_POST_H_

#include <windows.h>

namespace muster::platform::windows {

// The signal number (platform/signals.h) a console control event stands for:
// Ctrl-C SIGINT, Ctrl-Break SIGTERM (what the launcher sends to stop a
// worker), the console closing SIGHUP, log-off and shutdown SIGTERM.
int SignalOfCtrlEvent(DWORD ctrl_type);

// Queues a stop request for StopRequests::Wait. `always`: also when no
// StopRequests asked for that signal (the service manager's stop must never
// be lost). Returns whether it was queued.
bool PostStopRequest(int signal, bool always);

// The handler SetConsoleCtrlHandler installs: TRUE (handled) when the event's
// signal was asked for and queued. For the console closing, log-off and
// shutdown (after which Windows ends the process as soon as the handler
// returns) it waits up to 4 s for the owner to finish its drain.
BOOL WINAPI ConsoleCtrlHandler(DWORD ctrl_type);

}  // namespace muster::platform::windows

#endif  // MUSTER_PLATFORM_WINDOWS_STOP_POST_H_
