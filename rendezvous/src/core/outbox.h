// Outbox: the Coordinator's messages to agents, queued under its lock and
// written to the streams after the lock is released, in the order the state
// machine produced them.
//
// Why: a stream write (a copy into the stream's queue, a gRPC StartWrite) under
// the Coordinator's one lock stalls every other event of every job behind it;
// at 10,000 agents a round's RoundReady fan-out alone held the lock for the
// whole fan-out. Order still matters (RoundReady before a later Restart to the
// same agent), so messages are appended while the Coordinator's lock is held
// (its order is the state machine's order) and delivered by one thread at a
// time: whoever calls Flush first delivers what is queued, including what
// other threads append meanwhile; a Flush that finds a delivery under way
// returns at once and leaves its messages to it.
//
// A flusher is a gRPC thread that also reads some connection's streams; kept
// delivering other threads' messages through a 10,000-agent join storm, it
// starved that connection's heartbeats past their timeout. So once a Flush has
// delivered kFlushQuota messages and used kFlushBudget it stops and leaves the
// rest to the next Flush (every Coordinator event flushes, and musterd ticks
// every 20 ms).
//
// A broadcast (Restart, a job's verdict, Waiting) shares one message among all
// its recipients (AgentChannel::SendShared), so it is built and held once.
//
// Thread-safe.
#ifndef MUSTER_RENDEZVOUS_SRC_OUTBOX_H_
#define MUSTER_RENDEZVOUS_SRC_OUTBOX_H_

#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "muster/rendezvous/coordinator.h"

namespace muster::rendezvous {

class Outbox {
 public:
  static constexpr int kFlushQuota = 256;
  static constexpr absl::Duration kFlushBudget = absl::Milliseconds(2);

  // Queues msg for channel. Does not block on the stream.
  void Send(std::shared_ptr<AgentChannel> channel,
            std::shared_ptr<const v1::ServerMessage> msg);
  // Queues the end of channel's stream (after what is queued before it).
  void Close(std::shared_ptr<AgentChannel> channel, absl::Status status);

  // Delivers what is queued unless another thread is delivering (it then
  // delivers this thread's messages too), within the quota and budget above.
  // Call with no lock held that a channel could need.
  void Flush() ABSL_LOCKS_EXCLUDED(mu_);

  // Delivers everything queued, with no quota, after waiting for a delivery
  // under way to end. For shutdown: a job's verdict queued for one agent must
  // reach its stream before the server closes every stream (a static job's
  // node 0 exits, and stops its embedded server, the moment it hears its own).
  void Drain() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Delivery {
    std::shared_ptr<AgentChannel> channel;
    std::shared_ptr<const v1::ServerMessage> msg;  // null: a close
    absl::Status close_status;
  };

  // Hands each delivery to its channel, in order. No lock held.
  static void Deliver(std::vector<Delivery>& batch);

  absl::Mutex mu_;
  std::vector<Delivery> queue_ ABSL_GUARDED_BY(mu_);
  bool flushing_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_OUTBOX_H_
