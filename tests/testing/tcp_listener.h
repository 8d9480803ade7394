// A listening TCP socket for tests: bound on a numeric IPv4 address and a
// port (0: an ephemeral one), closed when the object goes.
//
//   TcpListener l("127.0.0.1");
//   ASSERT_TRUE(l.ok());
//   ProbeTcp("127.0.0.1", l.port(), ...);
#ifndef MUSTER_TESTS_TESTING_TCP_LISTENER_H_
#define MUSTER_TESTS_TESTING_TCP_LISTENER_H_

#include <string>

namespace muster::testing {

class TcpListener {
 public:
  explicit TcpListener(const std::string& address = "127.0.0.1", int port = 0);
  ~TcpListener();
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  // Whether it listens (bind and listen succeeded).
  bool ok() const { return fd_ >= 0; }
  // The port it listens on; 0 when not ok().
  int port() const { return port_; }
  // Stops listening (the port is refused from then on).
  void Close();

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace muster::testing

#endif  // MUSTER_TESTS_TESTING_TCP_LISTENER_H_
