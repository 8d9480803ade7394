// FakeServiceHost: a ServiceHost that records what the daemon tells its
// service manager, for tests. It is managed (or not) and asks for a watchdog
// interval as the test says.
#ifndef MUSTER_PLATFORM_FAKE_FAKE_SERVICE_HOST_H_
#define MUSTER_PLATFORM_FAKE_FAKE_SERVICE_HOST_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "muster/platform/service_host.h"

namespace muster::platform {

// Thread-safe.
class FakeServiceHost final : public ServiceHost {
 public:
  // One call, as the sd_notify message it stands for.
  struct Notice {
    enum Kind { kReady, kStatus, kPing, kStopping } kind;
    std::string status;
  };

  FakeServiceHost(bool managed, absl::Duration watchdog_interval)
      : managed_(managed), watchdog_interval_(watchdog_interval) {}

  bool managed() const override { return managed_; }
  absl::Duration watchdog_interval() const override {
    return watchdog_interval_;
  }
  void Ready(absl::string_view status) override {
    Record(Notice::kReady, status);
  }
  void SetStatus(absl::string_view status) override {
    Record(Notice::kStatus, status);
  }
  void Ping(absl::string_view status) override {
    Record(Notice::kPing, status);
  }
  void Stopping(absl::string_view status) override {
    Record(Notice::kStopping, status);
  }

  // Every call so far, in order.
  std::vector<Notice> notices() const;
  // Blocks up to `timeout` until at least `n` calls of `kind` were made;
  // whether they were.
  bool WaitFor(Notice::Kind kind, int n, absl::Duration timeout) const;

 private:
  void Record(Notice::Kind kind, absl::string_view status);

  const bool managed_;
  const absl::Duration watchdog_interval_;
  mutable absl::Mutex mu_;
  std::vector<Notice> notices_ ABSL_GUARDED_BY(mu_);
};

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_FAKE_FAKE_SERVICE_HOST_H_
