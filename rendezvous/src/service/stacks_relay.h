// StacksRelay: musterd's side of `muster stacks`. It knows which Session
// stream belongs to which job (from each accepted Join), sends CaptureStacks
// to every connected agent of a job and gathers their StacksReport until a
// deadline; agents that do not answer in time are named in the response.
//
// Threads: OnJoined/OnReport/OnGone come from the Session streams' queue
// threads, Gather from GetStacks' callback thread; `done` runs on whichever
// thread completes a request (the last report, a stream's end, or the relay's
// timer thread at the deadline), never with the relay's lock held.
#ifndef MUSTER_RENDEZVOUS_SRC_STACKS_RELAY_H_
#define MUSTER_RENDEZVOUS_SRC_STACKS_RELAY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "muster/rendezvous/coordinator.h"
#include "muster/v1/rendezvous.pb.h"

namespace muster::rendezvous {

// musterd's default wait for the agents' answers, and the most a caller may
// ask for.
inline constexpr absl::Duration kDefaultStacksTimeout = absl::Seconds(10);
inline constexpr absl::Duration kMaxStacksTimeout = absl::Seconds(60);

class StacksRelay {
 public:
  using Done = std::function<void(v1::GetStacksResponse)>;

  StacksRelay();
  // Completes every pending request with what it has, then joins the timer.
  ~StacksRelay();
  StacksRelay(const StacksRelay&) = delete;
  StacksRelay& operator=(const StacksRelay&) = delete;

  // A Join was accepted on stream `conn` (again after a Restart: replaces).
  void OnJoined(ConnectionId conn, const v1::Join& join,
                std::weak_ptr<AgentChannel> channel);
  // The stream ended: pending requests stop waiting for it.
  void OnGone(ConnectionId conn);
  void OnReport(ConnectionId conn, const v1::StacksReport& report);

  // Asks every connected agent of `job` for its workers' stacks; `done` is
  // called once, with every report that came within `timeout` and the agents
  // that did not answer. `members` (hostname, node id) are the job's round
  // members as the Coordinator knows them: one with no stream here is named
  // as missing too. With no agent to ask, done runs at once.
  void Gather(const std::string& job,
              const std::vector<std::pair<std::string, std::string>>& members,
              absl::Duration timeout, Done done);

 private:
  struct Agent {
    std::string job;
    std::string node_id;
    std::string hostname;
    std::weak_ptr<AgentChannel> channel;
  };
  struct Pending {
    absl::Time deadline;
    absl::Duration timeout;
    // Streams not yet answered, with the words that name them.
    absl::flat_hash_map<ConnectionId, std::string> waiting;
    v1::GetStacksResponse response;
    Done done;
  };
  // Takes the request out if it is complete (nothing waited for, or `force`).
  std::vector<Pending> TakeCompleteLocked(bool force_expired)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Finish(std::vector<Pending> done);
  void TimerLoop();

  absl::Mutex mu_;
  absl::flat_hash_map<ConnectionId, Agent> agents_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  int64_t next_request_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread timer_;
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_STACKS_RELAY_H_
