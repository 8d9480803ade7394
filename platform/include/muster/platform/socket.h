// Sockets with deadlines: libmuster_comm's own TCP connections (the peer
// monitor's mesh and the direct allreduce) and the TLS probe of rendezvous's
// grpc_security.cc, behind a small portable interface: non-blocking TCP
// sockets, one connect with a deadline, readiness polling over many of them,
// and a wake-up event a poll can watch. posix/socket.cc implements it with BSD
// sockets, poll(2) and eventfd(2); windows/socket_windows.cc with Winsock,
// WSAPoll and a loopback socket pair as the wake-up.
//
// Every socket made here is non-blocking, not inherited by child processes,
// and never raises SIGPIPE: a write to a connection the peer closed is an
// error result.
#ifndef MUSTER_PLATFORM_SOCKET_H_
#define MUSTER_PLATFORM_SOCKET_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace muster::platform {

// An OS socket handle: a file descriptor on POSIX, a SOCKET on Windows.
using SocketHandle = intptr_t;
inline constexpr SocketHandle kNoSocket = -1;

// The outcome of one non-blocking send or receive.
struct IoResult {
  enum Kind {
    kDone,        // `bytes` (> 0) moved.
    kWouldBlock,  // Nothing now; poll and try again.
    kClosed,      // Receive only: the peer closed the connection (EOF).
    kError,       // The connection failed: `error` says how.
  };
  Kind kind = kDone;
  size_t bytes = 0;
  int error = 0;  // The OS error number of kError.

  // Whether the error is a timeout (TCP keepalive gave up on the peer).
  bool TimedOut() const;
  // The OS's text for `error`.
  std::string ErrorText() const;
};

// A byte range to send, for gathered writes.
struct ConstBuffer {
  const void* data;
  size_t size;
};

// An owned TCP socket. Movable, not copyable; closes on destruction. Shutdown
// may be called from another thread while one polls or transfers on it (the
// handle stays valid until Close); everything else is for one thread at a
// time.
class Socket {
 public:
  Socket() = default;
  explicit Socket(SocketHandle handle) : handle_(handle) {}
  ~Socket() { Close(); }
  Socket(Socket&& other) noexcept : handle_(other.Release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  bool valid() const { return handle_ != kNoSocket; }
  SocketHandle handle() const { return handle_; }
  SocketHandle Release();
  // Closes the handle when valid; afterwards !valid(). Idempotent.
  void Close();

  // Ends both directions: the peer reads EOF, and a poll on this socket in
  // another thread wakes. Never blocks. No-op when !valid().
  void Shutdown() const;

  // Non-blocking transfers. `Send` and `SendV` never raise SIGPIPE.
  IoResult Send(const void* data, size_t size) const;
  IoResult SendV(const ConstBuffer* buffers, int count) const;
  IoResult Recv(void* data, size_t size) const;

  // Disables Nagle's algorithm (small messages go out at once).
  void SetNoDelay() const;
  // TCP keepalive: probes after `idle` without traffic, `count` probes
  // `interval` apart, after which the connection fails (IoResult::TimedOut).
  void SetKeepalive(absl::Duration idle, absl::Duration interval,
                    int count) const;

 private:
  SocketHandle handle_ = kNoSocket;
};

// A TCP socket listening on `ip` (numeric, IPv4 or IPv6) at an ephemeral
// port, which it stores in *port. Errors: FAILED_PRECONDITION (`ip` is not a
// numeric address), UNAVAILABLE naming the OS error. `what` names the caller
// in messages ("peer monitor").
absl::StatusOr<Socket> ListenTcp(const std::string& ip, int backlog, int* port,
                                 const std::string& what);

// Connects to ip:port (numeric), waiting until `deadline`. Errors:
// FAILED_PRECONDITION (not a numeric address), UNAVAILABLE naming the address
// and the OS error (refused, timed out, ...).
absl::StatusOr<Socket> ConnectTcp(const std::string& ip, int port,
                                  absl::Time deadline, const std::string& what);

// Connects to host:port, where `host` is a name or a numeric address, trying
// each address it resolves to in turn, all before `deadline`. The socket is
// then blocking, with send and receive timeouts of what is left of the
// deadline (at least 10 ms): for a blocking protocol over it (OpenSSL's
// SSL_set_fd in rendezvous's TLS probe). The connect itself is ConnectTcp's.
// Errors: FAILED_PRECONDITION when `host` does not resolve, UNAVAILABLE naming
// the last address tried and its OS error.
absl::StatusOr<Socket> ConnectTcpBlocking(const std::string& host, int port,
                                          absl::Time deadline,
                                          const std::string& what);

// A connection pending on `listener`, or an invalid Socket when there is none
// (or it failed at once). Never blocks.
Socket Accept(const Socket& listener);

// An event another thread can set to wake a poll: eventfd on Linux. Signal is
// thread-safe and never blocks; the event stays set once signalled.
class Wakeup {
 public:
  // Errors: UNAVAILABLE naming the OS error.
  static absl::StatusOr<std::unique_ptr<Wakeup>> Create();
  ~Wakeup();
  Wakeup(const Wakeup&) = delete;
  Wakeup& operator=(const Wakeup&) = delete;

  void Signal();
  SocketHandle handle() const { return handle_; }

 private:
  explicit Wakeup(SocketHandle handle) : handle_(handle) {}
  const SocketHandle handle_;
};

// The readiness of a set of sockets (and wake-ups), as poll(2) reports it.
// Reusable: Clear, Add, Wait, read the results. One thread at a time.
class PollSet {
 public:
  enum Events : uint8_t { kRead = 1, kWrite = 2 };

  void Clear() { entries_.clear(); }
  // Watches `handle` for `events`; returns its index.
  size_t Add(SocketHandle handle, uint8_t events);
  size_t size() const { return entries_.size(); }

  // Waits up to `timeout_ms` (0: just look) until an entry is ready. Returns
  // how many are (0 on timeout or an interrupted wait). Errors: UNAVAILABLE
  // naming the OS error.
  absl::StatusOr<int> Wait(int timeout_ms);

  // After Wait: whether entry i can be read (data, EOF or an error to
  // collect), written (or has an error to collect), or is ready at all.
  bool Readable(size_t i) const { return entries_[i].readable; }
  bool Writable(size_t i) const { return entries_[i].writable; }
  bool Ready(size_t i) const {
    return entries_[i].readable || entries_[i].writable;
  }
  // Marks every entry ready for what it watches, as if Wait said so: a
  // caller that tries every socket once before sleeping.
  void MarkAllReady();

 private:
  // The OS's poll bits: data to read, room to write, an error or hang-up.
  struct PollBits {
    int in;
    int out;
    int failed;
  };
  // Wait over the OS's poll (posix/ and windows/ call it): PollFd is its array
  // type (poll(2)'s pollfd, Winsock's WSAPOLLFD: the same fields), `poll(fds,
  // timeout_ms, &interrupted, &error)` returns how many are ready, or -1 with
  // the OS's error text. Defined in src/bsd_sockets.h.
  template <typename PollFd, typename Poll>
  absl::StatusOr<int> WaitWith(int timeout_ms, const PollBits& bits, Poll poll);
  // After the OS's wait: entry i had data (`in`), room (`out`) or an error or
  // hang-up (`failed`, which makes it ready for whatever it watches).
  void SetResult(size_t i, bool in, bool out, bool failed);
  // After a failed OS wait: nothing is ready; 0 if it was `interrupted`, else
  // UNAVAILABLE `why`.
  absl::StatusOr<int> WaitFailed(bool interrupted, const std::string& why);

  struct Entry {
    SocketHandle handle;
    uint8_t events;
    bool readable;
    bool writable;
  };
  std::vector<Entry> entries_;
};

// Milliseconds from now to `deadline` for PollSet::Wait: 0 when past, at most
// 60 s.
int PollMs(absl::Time deadline);

}  // namespace muster::platform

#endif  // MUSTER_PLATFORM_SOCKET_H_
