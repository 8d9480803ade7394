#include "tests/testing/ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace muster::testing {

std::string LoopbackEndpoint(int port) {
  return absl::StrCat("127.0.0.1:", port);
}

HeldPort::HeldPort(const std::string& address, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, address.c_str(), &a.sin_addr) != 1) return;
  fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return;
  socklen_t len = sizeof(a);
  if (bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      listen(fd_, 4) != 0 ||
      getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    Close();
    return;
  }
  port_ = ntohs(a.sin_port);
}

HeldPort::~HeldPort() { Close(); }

HeldPort::HeldPort(HeldPort&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), port_(std::exchange(other.port_, 0)) {}

void HeldPort::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

int ReadPortFile(const std::string& path) {
  std::ifstream f(path);
  std::string text;
  int port = 0;
  if (f && std::getline(f, text) && absl::SimpleAtoi(text, &port) && port > 0)
    return port;
  return 0;
}

}  // namespace muster::testing
