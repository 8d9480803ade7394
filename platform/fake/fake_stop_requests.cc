#include "platform/fake/fake_stop_requests.h"

#include <utility>

namespace muster::platform {

FakeStopRequests::~FakeStopRequests() {
  {
    absl::MutexLock lock(&mu_);
    ending_ = true;
  }
  if (watcher_.joinable()) watcher_.join();
}

void FakeStopRequests::Request(int signal) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(signal);
}

bool FakeStopRequests::HasNext() const { return !queue_.empty() || ending_; }

int FakeStopRequests::Next() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &FakeStopRequests::HasNext));
  if (queue_.empty()) return -1;
  const int signal = queue_.front();
  queue_.pop_front();
  return signal;
}

int FakeStopRequests::Wait() { return Next(); }

void FakeStopRequests::StartWatcher(std::function<void(int)> on_stop) {
  if (watcher_.joinable()) return;
  watcher_ = std::thread([this, on_stop = std::move(on_stop)] {
    for (int signal = Next(); signal >= 0; signal = Next()) on_stop(signal);
  });
}

}  // namespace muster::platform
