// doctor_port_holder: listens on a TCP port until killed (or --seconds pass),
// so that tests have a process that holds a port, in this network namespace
// or, run under `ip netns exec`, in another one.
//
//   doctor_port_holder --addr 0.0.0.0 --port 5000 [--seconds 120]
//
// Prints "listening ADDR:PORT pid PID" once the socket listens.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  std::string addr = "127.0.0.1";
  int port = 0;
  int seconds = 120;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--addr") addr = argv[i + 1];
    if (flag == "--port") port = std::atoi(argv[i + 1]);
    if (flag == "--seconds") seconds = std::atoi(argv[i + 1]);
  }
  const bool v6 = addr.find(':') != std::string::npos;
  int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int rc = -1;
  if (v6) {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET6, addr.c_str(), &a.sin6_addr);
    rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, addr.c_str(), &a.sin_addr);
    rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  }
  if (rc != 0 || listen(fd, 16) != 0) {
    std::fprintf(stderr, "doctor_port_holder: %s:%d: %s\n", addr.c_str(), port,
                 std::strerror(errno));
    return 1;
  }
  std::printf("listening %s:%d pid %d\n", addr.c_str(), port,
              static_cast<int>(getpid()));
  std::fflush(stdout);
  // The kernel completes handshakes into the backlog: probes see it open.
  for (int left = seconds * 10; left > 0; --left) {
    usleep(100 * 1000);
  }
  return 0;
}
