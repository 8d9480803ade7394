// Polling with a deadline: the one way tests wait for a condition that another
// thread or process makes true. Never a blind sleep, never an unbounded loop.
#ifndef MUSTER_TESTS_TESTING_WAIT_H_
#define MUSTER_TESTS_TESTING_WAIT_H_

#include <functional>

#include "absl/time/time.h"

namespace muster::testing {

// Polls cond every `poll` until it holds or `timeout` has passed, then checks
// it once more; returns its last value (so a condition that became true just
// at the deadline still counts). Blocks the calling thread for at most
// timeout + one poll + the time cond takes.
bool WaitUntil(const std::function<bool()>& cond, absl::Duration timeout,
               absl::Duration poll = absl::Milliseconds(20));

}  // namespace muster::testing

#endif  // MUSTER_TESTS_TESTING_WAIT_H_
