// The timer loop of a Coordinator's host (RendezvousServer, LocalRendezvous).
#ifndef MUSTER_RENDEZVOUS_SRC_TICK_LOOP_H_
#define MUSTER_RENDEZVOUS_SRC_TICK_LOOP_H_

#include <algorithm>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "muster/rendezvous/coordinator.h"

namespace muster::rendezvous {

// Calls coordinator.Tick() at least every `interval`, sooner when Tick asks
// to, until *stopping is true. `mu` guards *stopping; it is held except while
// Tick runs, and whoever sets *stopping under it wakes the loop at once. Blocks
// the calling thread (a dedicated one) until then. `after_tick`, when set, runs
// after each Tick without `mu` (musterd's state journal, a replica's mirror
// of its jobs). `may_tick`, when set, is asked before each Tick: a replica
// that does not lead (or no longer knows that it does) decides nothing.
//
// The caller locks `mu` (and unlocks it after): a flag guarded by `mu` can
// only be handed over by reference, for the thread-safety analysis, while
// `mu` is held.
inline void RunCoordinatorTicks(Coordinator& coordinator, absl::Mutex& mu,
                                const bool& stopping, absl::Duration interval,
                                const std::function<void()>& after_tick = {},
                                const std::function<bool()>& may_tick = {})
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  while (!stopping) {
    mu.Unlock();
    const absl::Time next =
        !may_tick || may_tick() ? coordinator.Tick() : absl::Now() + interval;
    if (after_tick) after_tick();
    mu.Lock();
    mu.AwaitWithDeadline(absl::Condition(&stopping),
                         std::min(next, absl::Now() + interval));
  }
}

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_TICK_LOOP_H_
