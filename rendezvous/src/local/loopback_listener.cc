#include "rendezvous/src/local/loopback_listener.h"

#include <utility>

#include "muster/common/logging.h"

namespace muster::rendezvous {

absl::StatusOr<std::unique_ptr<LoopbackListener>> LoopbackListener::Open() {
  int port = 0;
  absl::StatusOr<platform::Socket> listener =
      platform::ListenTcp("127.0.0.1", 128, &port, "the workers' store");
  if (!listener.ok()) return listener.status();
  absl::StatusOr<std::unique_ptr<platform::Wakeup>> wakeup =
      platform::Wakeup::Create();
  if (!wakeup.ok()) return wakeup.status();
  return std::unique_ptr<LoopbackListener>(
      new LoopbackListener(*std::move(listener), *std::move(wakeup), port));
}

int LoopbackListener::Accept() {
  platform::PollSet poll;
  poll.Add(listener_.handle(), platform::PollSet::kRead);
  poll.Add(wakeup_->handle(), platform::PollSet::kRead);
  while (true) {
    // 0: interrupted; wait again.
    absl::StatusOr<int> ready = poll.Wait(-1);
    if (!ready.ok()) {
      MUSTER_LOG(ERROR) << "the workers' store: " << ready.status().message();
      return -1;
    }
    if (poll.Readable(1)) return -1;
    if (!poll.Readable(0)) continue;
    platform::Socket connection = platform::Accept(listener_);
    if (!connection.valid()) continue;
    connection.SetNoDelay();
    return static_cast<int>(connection.Release());
  }
}

void LoopbackListener::Wake() { wakeup_->Signal(); }

void LoopbackListener::CloseConnection(int fd) { platform::Socket closing(fd); }

}  // namespace muster::rendezvous
