// The service host: what a daemon tells the service manager that runs it.
// systemd's sd_notify protocol today (Type=notify: READY=1, STATUS=,
// WATCHDOG=1, STOPPING=1); the Windows service control manager next
// (SERVICE_RUNNING, SetServiceStatus). Library muster_platform_service (it
// links libsystemd); only musterd needs it.
#ifndef MUSTER_PLATFORM_SERVICE_HOST_H_
#define MUSTER_PLATFORM_SERVICE_HOST_H_

#include <string>

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

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_SERVICE_HOST_H_
