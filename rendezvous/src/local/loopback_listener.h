// LoopbackListener: a TCP listener on 127.0.0.1 with an ephemeral port whose
// blocking Accept another thread can end. The in-process rendezvous of
// --standalone hands each accepted connection to its Store service
// (local_store_server_fd.cc). Portable: the sockets, the poll and the wake-up
// are platform's (muster/platform/socket.h).
#ifndef MUSTER_RENDEZVOUS_SRC_LOOPBACK_LISTENER_H_
#define MUSTER_RENDEZVOUS_SRC_LOOPBACK_LISTENER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "muster/platform/socket.h"

namespace muster::rendezvous {

// Thread-safe: Accept on one thread, Wake from any.
class LoopbackListener {
 public:
  // Errors: UNAVAILABLE with the OS's reason when it cannot listen.
  static absl::StatusOr<std::unique_ptr<LoopbackListener>> Open();
  LoopbackListener(const LoopbackListener&) = delete;
  LoopbackListener& operator=(const LoopbackListener&) = delete;

  int port() const { return port_; }

  // Blocks until a connection comes and returns its descriptor (non-blocking,
  // close-on-exec, TCP_NODELAY; the caller owns it), or -1 once Wake was
  // called or the listener failed (logged). A failed accept is skipped.
  int Accept();

  // Ends every Accept, now and later. Idempotent.
  void Wake();

  // Closes a descriptor Accept returned that the caller does not use.
  static void CloseConnection(int fd);

 private:
  LoopbackListener(platform::Socket listener,
                   std::unique_ptr<platform::Wakeup> wakeup, int port)
      : listener_(std::move(listener)),
        wakeup_(std::move(wakeup)),
        port_(port) {}
  const platform::Socket listener_;
  const std::unique_ptr<platform::Wakeup> wakeup_;
  const int port_;
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_LOOPBACK_LISTENER_H_
