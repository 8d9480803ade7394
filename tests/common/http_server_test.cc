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
std::string Get(int port, const std::string& path, absl::Duration timeout,
                const std::string& method = "GET",
                const std::string& headers = "") {
  const int fd = ConnectTo(port, timeout);
  if (fd < 0) return "";
  const std::string req =
      absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: localhost\r\n",
                   headers, "Connection: close\r\n\r\n");
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
  auto server =
      HttpServer::Start("127.0.0.1:0", {{"/healthz", [](const HttpRequest&) {
                                           return HttpResponse{.body = "ok\n"};
                                         }}});
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

// A handler sees the method, the decoded path, the query and the headers
// (names lowercase); prefix routes serve what is below them, the exact route
// and then the longest prefix win; every answer carries the security
// headers; only GET and HEAD are served.
TEST(HttpServerTest, RoutesByPrefixAndHandsTheRequestToTheHandler) {
  auto echo = [](const char* which) {
    return [which](const HttpRequest& r) {
      return HttpResponse{
          .body = absl::StrCat(which, " path=", r.path,
                               " filter=", r.QueryParam("filter"),
                               " auth=", r.Header("authorization"), "\n"),
          .headers = {{"X-Test", "yes"}}};
    };
  };
  auto server =
      HttpServer::Start("127.0.0.1:0", {{"/api/v1/jobs", echo("list")},
                                        {"/api/v1/jobs/", echo("job")},
                                        {"/api/v1/", echo("api")}});
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();

  std::string r = Get(port, "/api/v1/jobs?filter=a%20b+c&x=1", absl::Seconds(5),
                      "GET", "Authorization: Bearer abc\r\n");
  EXPECT_THAT(r, HasSubstr("200 OK"));
  EXPECT_THAT(r, HasSubstr("list path=/api/v1/jobs filter=a b c "
                           "auth=Bearer abc"));
  EXPECT_THAT(r, HasSubstr("X-Content-Type-Options: nosniff"));
  EXPECT_THAT(r, HasSubstr("Referrer-Policy: no-referrer"));
  EXPECT_THAT(r, HasSubstr("X-Test: yes"));

  r = Get(port, "/api/v1/jobs/job-1", absl::Seconds(5));
  EXPECT_THAT(r, HasSubstr("job path=/api/v1/jobs/job-1 filter= auth=\n"));
  r = Get(port, "/api/v1/other", absl::Seconds(5));
  EXPECT_THAT(r, HasSubstr("api path=/api/v1/other"));
  r = Get(port, "/elsewhere", absl::Seconds(5));
  EXPECT_THAT(r, HasSubstr("404"));
  EXPECT_THAT(r, HasSubstr("no such path: /elsewhere"));

  r = Get(port, "/api/v1/jobs", absl::Seconds(5), "POST");
  EXPECT_THAT(r, HasSubstr("405"));
  EXPECT_THAT(r, HasSubstr("Allow: GET, HEAD"));
  r = Get(port, "/api/v1/jobs", absl::Seconds(5), "HEAD");
  EXPECT_THAT(r, HasSubstr("200 OK"));
  EXPECT_THAT(r, ::testing::Not(HasSubstr("list path")));
}

}  // namespace
}  // namespace muster
