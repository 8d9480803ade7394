// The HTTP server behind /healthz, /readyz and /metrics answers while idle or
// half-sent connections hold on to it (issue 11: 64 idle connections made
// /healthz time out when it had two worker threads).
#include "muster/common/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace muster {
namespace {

using ::testing::HasSubstr;

int ConnectTo(int port, absl::Duration receive_timeout) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{};
  tv.tv_sec = absl::ToInt64Seconds(receive_timeout);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// The whole response, or "" when none came within `timeout`.
std::string Get(int port, const std::string& path, absl::Duration timeout) {
  const int fd = ConnectTo(port, timeout);
  if (fd < 0) return "";
  const std::string req =
      absl::StrCat("GET ", path,
                   " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
  std::string out;
  if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
      out.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return out;
}

TEST(HttpServerTest, HealthAnswersWhileIdleAndHalfSentConnectionsHang) {
  auto server = HttpServer::Start(
      "127.0.0.1:0",
      {{"/healthz", [] { return HttpResponse{.body = "ok\n"}; }}});
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  std::vector<int> idle;
  for (int i = 0; i < 64; ++i) {
    const int fd = ConnectTo(port, absl::Seconds(1));
    ASSERT_GE(fd, 0);
    if (i % 2 == 1) {
      // Half a request line, never finished.
      const std::string part = "GET /healthz HTTP/1.1\r\nHost: l";
      ASSERT_EQ(write(fd, part.data(), part.size()),
                static_cast<ssize_t>(part.size()));
    }
    idle.push_back(fd);
  }
  const absl::Time start = absl::Now();
  const std::string response = Get(port, "/healthz", absl::Seconds(3));
  const absl::Duration took = absl::Now() - start;
  EXPECT_THAT(response, HasSubstr("200 OK"));
  EXPECT_LT(took, absl::Seconds(3)) << "answered only after the idle ones";
  std::cout << "/healthz answered in " << absl::FormatDuration(took)
            << " with 64 idle connections open" << std::endl;
  for (int fd : idle) close(fd);
}

}  // namespace
}  // namespace muster
