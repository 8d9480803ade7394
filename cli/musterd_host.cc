#include "cli/musterd_host.h"

#include <utility>

#include "muster/common/logging.h"
#include "muster/platform/signals.h"

namespace muster::cli {

ServiceNotifier::ServiceNotifier(platform::ServiceHost* host,
                                 std::function<std::string()> status_line)
    : host_(host), status_line_(std::move(status_line)) {
  if (!host_->managed()) return;
  const absl::Duration watchdog = host_->watchdog_interval();
  if (watchdog > absl::ZeroDuration()) {
    period_ = watchdog / 2;
    watchdog_ = true;
    MUSTER_LOG(INFO) << "systemd watchdog: " << watchdog << ", pinging every "
                     << period_;
  }
  host_->Ready(status_line_());
  thread_ = std::thread([this] { Run(); });
}

void ServiceNotifier::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void ServiceNotifier::Run() {
  std::string last_status;
  while (!stop_.WaitForNotificationWithTimeout(period_)) {
    std::string status = status_line_();
    const bool changed = status != last_status;
    if (watchdog_) {
      host_->Ping(changed ? status : "");
    } else if (changed) {
      host_->SetStatus(status);
    }
    last_status = std::move(status);
  }
}

int WaitForStop(platform::StopRequestSource& stops,
                const std::function<void()>& on_hangup) {
  while (true) {
    const int sig = stops.Wait();
    if (sig != platform::kSignalHangup) return sig;
    on_hangup();
  }
}

}  // namespace muster::cli
