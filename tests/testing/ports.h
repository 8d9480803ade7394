// TCP ports for tests: a port held open by a listening socket (so that a
// server under test finds it taken), and the port a server wrote to its
// --port-file.
#ifndef MUSTER_TESTS_TESTING_PORTS_H_
#define MUSTER_TESTS_TESTING_PORTS_H_

#include <string>

namespace muster::testing {

// "127.0.0.1:<port>".
std::string LoopbackEndpoint(int port);

// A TCP socket bound to `address` (an IPv4 literal) and `port` (0: the kernel
// picks one) and listening, until Close() or destruction. On 0.0.0.0 it stops
// a later bind of the port on any address; on 127.0.0.1, only there. Not
// thread-safe; movable, not copyable.
class HeldPort {
 public:
  explicit HeldPort(const std::string& address = "0.0.0.0", int port = 0);
  ~HeldPort();
  HeldPort(HeldPort&& other) noexcept;
  HeldPort& operator=(HeldPort&&) = delete;
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;

  // Whether the socket is bound and listening (tests ASSERT it).
  bool ok() const { return fd_ >= 0 && port_ > 0; }
  // The bound port (0 when !ok()).
  int port() const { return port_; }
  // Closes the socket: the port is free again. Idempotent.
  void Close();

 private:
  int fd_ = -1;
  int port_ = 0;
};

// The port on the first line of a --port-file, or 0 when the file is absent or
// holds no port (yet).
int ReadPortFile(const std::string& path);

}  // namespace muster::testing

#endif  // MUSTER_TESTS_TESTING_PORTS_H_
