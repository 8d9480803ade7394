// FakeEventLog: an EventLog that records what it is told, for tests.
#ifndef MUSTER_PLATFORM_FAKE_FAKE_EVENT_LOG_H_
#define MUSTER_PLATFORM_FAKE_FAKE_EVENT_LOG_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "muster/platform/event_log.h"

namespace muster::platform {

// Thread-safe.
class FakeEventLog final : public EventLog {
 public:
  struct Event {
    EventKind kind;
    std::string message;
  };

  void Report(EventKind kind, absl::string_view message) override {
    absl::MutexLock lock(&mu_);
    events_.push_back({kind, std::string(message)});
  }

  // Every event so far, in order.
  std::vector<Event> events() const {
    absl::MutexLock lock(&mu_);
    return events_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<Event> events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_FAKE_FAKE_EVENT_LOG_H_
