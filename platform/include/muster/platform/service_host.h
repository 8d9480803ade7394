// The service host: what a daemon tells the service manager that runs it.
// systemd's sd_notify protocol today (Type=notify: READY=1, STATUS=,
// WATCHDOG=1, STOPPING=1); the Windows service control manager next
// (SERVICE_RUNNING, SetServiceStatus). Library muster_platform_service (it
// links libsystemd); only musterd needs it.
#ifndef MUSTER_PLATFORM_SERVICE_HOST_H_
#define MUSTER_PLATFORM_SERVICE_HOST_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace muster::platform {

// Thread-safe. Every call is a no-op when the process does not run under a
// service manager.
class ServiceHost {
 public:
  virtual ~ServiceHost() = default;

  // Whether a service manager listens ($NOTIFY_SOCKET under systemd).
  virtual bool managed() const = 0;

  // How often the manager wants a Ping (WatchdogSec=); zero when it watches
  // nothing.
  virtual absl::Duration watchdog_interval() const = 0;

  // The service is up; `status` is its one-line state.
  virtual void Ready(absl::string_view status) = 0;
  // A new one-line state.
  virtual void SetStatus(absl::string_view status) = 0;
  // "Still alive" for the manager's watchdog, optionally with a new status
  // line (empty: unchanged), in one message.
  virtual void Ping(absl::string_view status) = 0;
  // The service is shutting down, and why.
  virtual void Stopping(absl::string_view status) = 0;

  // The process's service host (systemd's notify socket). Never null.
  static ServiceHost* Default();
};

// Runs `body` and returns its exit code. On Windows, when the service control
// manager started this process, as the service `name`
// (StartServiceCtrlDispatcherW): ServiceHost::Default() then reports to the
// manager (Ready: SERVICE_RUNNING; Stopping: SERVICE_STOP_PENDING), its STOP,
// SHUTDOWN and PRESHUTDOWN controls arrive as a SIGTERM stop request
// (StopRequests), and body's return reports SERVICE_STOPPED with its exit
// code. Otherwise (a console; every Linux process: systemd runs musterd as a
// plain process) `body` just runs in the calling thread.
int RunService(const std::string& name, const std::function<int()>& body);

// What InstallService registers.
struct ServiceInstall {
  std::string name = "musterd";
  std::string display_name;  // empty: name
  std::string description;
  std::string program;            // empty: this executable
  std::vector<std::string> args;  // its arguments (quoted as Windows needs)
  bool auto_start = true;         // else started on demand
};

// Registers / removes a Windows service (the service control manager;
// administrators only). Uninstall stops a running service first (up to 30 s).
// Errors: ALREADY_EXISTS, NOT_FOUND, PERMISSION_DENIED (with the fix: an
// elevated prompt), INTERNAL with the manager's reason; UNIMPLEMENTED on Linux
// (deploy/ has the systemd unit).
absl::Status InstallService(const ServiceInstall& spec);
absl::Status UninstallService(const std::string& name);

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_SERVICE_HOST_H_
