#include "platform/fake/fake_service_host.h"

#include <algorithm>

namespace muster::platform {

void FakeServiceHost::Record(Notice::Kind kind, absl::string_view status) {
  absl::MutexLock lock(&mu_);
  notices_.push_back(Notice{kind, std::string(status)});
}

std::vector<FakeServiceHost::Notice> FakeServiceHost::notices() const {
  absl::MutexLock lock(&mu_);
  return notices_;
}

bool FakeServiceHost::WaitFor(Notice::Kind kind, int n,
                              absl::Duration timeout) const {
  auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::count_if(notices_.begin(), notices_.end(),
                         [&](const Notice& x) { return x.kind == kind; }) >= n;
  };
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

}  // namespace muster::platform
