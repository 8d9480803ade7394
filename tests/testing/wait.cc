#include "tests/testing/wait.h"

#include "absl/time/clock.h"

namespace muster::testing {

bool WaitUntil(const std::function<bool()>& cond, absl::Duration timeout,
               absl::Duration poll) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (cond()) return true;
    absl::SleepFor(poll);
  }
  return cond();
}

}  // namespace muster::testing
