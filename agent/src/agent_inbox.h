// What the agent's main loop waits on: one inbox for everything that can
// change what it must do, so that it blocks until something happens (or the
// next deadline) instead of polling.
//
// clang-format off
//
//   session pump thread ── RendezvousClient::Next ──► Push(session, message) ─┐
//   worker group's thread ── a worker ended (LaunchOptions::on_exit) ──► Wake ├─► AgentInbox ──► Wait / Take
//   signal watcher ── ElasticAgent::RequestStop ──────────────────────► Wake ┘        (the main loop)
//
// clang-format on
//
// The server's messages keep their order; a message of a session the agent
// has left (a reconnect, the fence) is dropped, as the client that held it
// is. A wake carries nothing: the loop looks at the workers and the stop
// request itself.
#ifndef MUSTER_AGENT_SRC_AGENT_INBOX_H_
#define MUSTER_AGENT_SRC_AGENT_INBOX_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "muster/rendezvous/client.h"
#include "muster/v1/rendezvous.pb.h"

namespace muster::agent {

// Thread-safe.
class AgentInbox {
 public:
  using Item = absl::StatusOr<v1::ServerMessage>;

  // A new session's messages from now on: what earlier sessions left is
  // dropped, and so is whatever they still push. Returns the number its pump
  // pushes with.
  uint64_t OpenSession();
  // From session `session`'s pump: its next message, or how it ended (any
  // status but DEADLINE_EXCEEDED). Dropped unless `session` is the current
  // one. Never blocks for long.
  void Push(uint64_t session, Item item);
  // Something the loop must look at now (a worker ended, a stop request).
  // Never blocks for long.
  void Wake();
  // Blocks up to `timeout` (real time) until a message is queued or Wake was
  // called since the last Wait returned; returns at once when either already
  // holds. Clears the wake.
  void Wait(absl::Duration timeout);
  // The oldest message of the current session; nullopt when none.
  std::optional<Item> Take();

 private:
  bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return woken_ || !items_.empty();
  }
  absl::Mutex mu_;
  uint64_t session_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Item> items_ ABSL_GUARDED_BY(mu_);
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
};

// A thread that reads one session's messages (RendezvousClient::Next) into
// an AgentInbox until the session ends or Stop. RequestStop before closing
// the client (a closed client's own ending is not the server's word, and is
// dropped), and destroy the pump (which joins) before the client.
class SessionPump {
 public:
  // `client` and `inbox` (not owned) outlive the pump.
  SessionPump(rendezvous::RendezvousClient* client, AgentInbox* inbox);
  ~SessionPump();
  SessionPump(const SessionPump&) = delete;
  SessionPump& operator=(const SessionPump&) = delete;

  // What Next returns from now on is dropped (a message it returned just
  // before may still be pushed: OpenSession drops that). Never blocks.
  void RequestStop() { quit_.store(true); }

 private:
  void Loop();

  rendezvous::RendezvousClient* const client_;
  AgentInbox* const inbox_;
  const uint64_t session_;
  std::atomic<bool> quit_{false};
  std::thread thread_;
};

}  // namespace muster::agent

#endif  // MUSTER_AGENT_SRC_AGENT_INBOX_H_
