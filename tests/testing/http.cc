#include "tests/testing/http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace muster::testing {

std::string HttpGet(int port, const std::string& path,
                    const std::string& headers) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    std::string req =
        absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: localhost\r\n", headers,
                     "Connection: close\r\n\r\n");
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0)
        out.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return out;
}

int HttpStatusCode(const std::string& response) {
  // "HTTP/1.1 200 OK"
  const size_t space = response.find(' ');
  int code = 0;
  if (space == std::string::npos ||
      !absl::SimpleAtoi(response.substr(space + 1, 3), &code)) {
    return 0;
  }
  return code;
}

std::string HttpBody(const std::string& response) {
  const size_t end = response.find("\r\n\r\n");
  return end == std::string::npos ? "" : response.substr(end + 4);
}

}  // namespace muster::testing
