// ServiceHost on Windows (issue: Windows): the service control manager. Until
// then a process that no manager runs. See README.md.
#include "muster/platform/service_host.h"

namespace muster::platform {
namespace {

class Unmanaged : public ServiceHost {
 public:
  bool managed() const override { return false; }
  absl::Duration watchdog_interval() const override {
    return absl::ZeroDuration();
  }
  void Ready(absl::string_view) override {}
  void SetStatus(absl::string_view) override {}
  void Ping(absl::string_view) override {}
  void Stopping(absl::string_view) override {}
};

}  // namespace

ServiceHost* ServiceHost::Default() {
  static ServiceHost* host = new Unmanaged();
  return host;
}

}  // namespace muster::platform
