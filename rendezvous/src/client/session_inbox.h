// The server's messages for one agent session, queued until Next takes them,
// and how the session ended: what the RendezvousClient implementations (over
// gRPC: SessionClient and the replicas' FollowingClient; in process:
// LocalRendezvous's client) hand to Next.
#ifndef MUSTER_RENDEZVOUS_SRC_SESSION_INBOX_H_
#define MUSTER_RENDEZVOUS_SRC_SESSION_INBOX_H_

#include <deque>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "muster/v1/rendezvous.pb.h"

namespace muster::rendezvous {

// Next reports the queued messages first, then the end. Not thread-safe: its
// owner guards it with the mutex that also guards the rest of its session
// state, and waits on HasNext under that mutex.
class SessionInbox {
 public:
  void Push(v1::ServerMessage msg) { messages_.push_back(std::move(msg)); }

  // Records how the session ended; the first end wins.
  void End(absl::Status status) {
    if (!end_.has_value()) end_ = std::move(status);
  }
  bool ended() const { return end_.has_value(); }
  // How it ended. Only once ended().
  const absl::Status& end() const { return *end_; }

  // Whether Next has something to report without waiting.
  bool HasNext() const { return !messages_.empty() || end_.has_value(); }

  // The oldest queued message, else how the session ended; nullopt when there
  // is neither yet.
  std::optional<absl::StatusOr<v1::ServerMessage>> Take() {
    if (!messages_.empty()) {
      v1::ServerMessage msg = std::move(messages_.front());
      messages_.pop_front();
      return msg;
    }
    if (end_.has_value()) return *end_;
    return std::nullopt;
  }

 private:
  std::deque<v1::ServerMessage> messages_;
  std::optional<absl::Status> end_;
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_SESSION_INBOX_H_
