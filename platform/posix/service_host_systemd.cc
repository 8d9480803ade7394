// The service host under systemd: sd_notify on $NOTIFY_SOCKET (Type=notify).
#include <systemd/sd-daemon.h>

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "muster/platform/env.h"
#include "muster/platform/service_host.h"

namespace muster::platform {
namespace {

class SystemdHost : public ServiceHost {
 public:
  SystemdHost() {
    const std::string socket = GetEnv("NOTIFY_SOCKET").value_or("");
    managed_ = !socket.empty();
    uint64_t usec = 0;
    // > 0 only when WATCHDOG_USEC is set and WATCHDOG_PID, if set, is ours.
    if (managed_ && sd_watchdog_enabled(/*unset_environment=*/0, &usec) > 0 &&
        usec > 0) {
      watchdog_ = absl::Microseconds(static_cast<int64_t>(usec));
    }
  }

  bool managed() const override { return managed_; }
  absl::Duration watchdog_interval() const override { return watchdog_; }

  void Ready(absl::string_view status) override {
    Notify(absl::StrCat("READY=1\nSTATUS=", status));
  }
  void SetStatus(absl::string_view status) override {
    Notify(absl::StrCat("STATUS=", status));
  }
  void Ping(absl::string_view status) override {
    std::string message = "WATCHDOG=1\n";
    if (!status.empty()) absl::StrAppend(&message, "STATUS=", status);
    Notify(message);
  }
  void Stopping(absl::string_view status) override {
    Notify(absl::StrCat("STOPPING=1\nSTATUS=", status));
  }

 private:
  // sd_notify does nothing without $NOTIFY_SOCKET.
  static void Notify(const std::string& message) {
    sd_notify(0, message.c_str());
  }

  bool managed_ = false;
  absl::Duration watchdog_ = absl::ZeroDuration();
};

}  // namespace

ServiceHost* ServiceHost::Default() {
  static ServiceHost* host = new SystemdHost();
  return host;
}

}  // namespace muster::platform

namespace muster::platform {

// systemd runs musterd as an ordinary process (Type=notify).
int RunService(const std::string&, const std::function<int()>& body) {
  return body();
}

absl::Status InstallService(const ServiceInstall& spec) {
  return absl::UnimplementedError(absl::StrCat(
      "cannot install the service '", spec.name,
      "': services are installed this way on Windows only; on Linux use the "
      "systemd unit in deploy/"));
}

absl::Status UninstallService(const std::string& name) {
  return absl::UnimplementedError(absl::StrCat(
      "cannot uninstall the service '", name,
      "': on Linux, disable the systemd unit (systemctl disable --now ", name,
      ")"));
}

}  // namespace muster::platform
