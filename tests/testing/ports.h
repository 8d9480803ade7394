// TCP ports for tests: the loopback endpoint of a port, and the port a server
// wrote to its --port-file. (A port held open by a listening socket:
// tcp_listener.h.)
#ifndef MUSTER_TESTS_TESTING_PORTS_H_
#define MUSTER_TESTS_TESTING_PORTS_H_

#include <string>

namespace muster::testing {

// "127.0.0.1:<port>".
std::string LoopbackEndpoint(int port);

// The port on the first line of a --port-file, or 0 when the file is absent or
// holds no port (yet).
int ReadPortFile(const std::string& path);

}  // namespace muster::testing

#endif  // MUSTER_TESTS_TESTING_PORTS_H_
