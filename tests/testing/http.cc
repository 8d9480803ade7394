#include "tests/testing/http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>

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

std::string HttpsGet(int port, const std::string& path, const std::string& ca,
                     const std::string& headers) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(
      SSL_CTX_new(TLS_client_method()), &SSL_CTX_free);
  if (ctx == nullptr ||
      SSL_CTX_load_verify_locations(ctx.get(), ca.c_str(), nullptr) != 1) {
    return "TLS error: cannot load the CA " + ca;
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  X509_VERIFY_PARAM_set1_ip_asc(SSL_CTX_get0_param(ctx.get()), "127.0.0.1");
  std::unique_ptr<BIO, decltype(&BIO_free_all)> bio(
      BIO_new_ssl_connect(ctx.get()), &BIO_free_all);
  const std::string target = absl::StrCat("127.0.0.1:", port);
  BIO_set_conn_hostname(bio.get(), target.c_str());
  if (BIO_do_connect(bio.get()) == 1) {
    // As HttpGet: at most 5 s for each read (the handshake's too).
    int fd = -1;
    BIO_get_fd(bio.get(), &fd);
    timeval tv{5, 0};
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  if (BIO_do_handshake(bio.get()) != 1) {
    char reason[256] = "";
    ERR_error_string_n(ERR_get_error(), reason, sizeof(reason));
    ERR_clear_error();
    return absl::StrCat("TLS error: ", reason);
  }
  const std::string req =
      absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: localhost\r\n", headers,
                   "Connection: close\r\n\r\n");
  std::string out;
  if (BIO_write(bio.get(), req.data(), static_cast<int>(req.size())) ==
      static_cast<int>(req.size())) {
    char buf[4096];
    int n;
    while ((n = BIO_read(bio.get(), buf, sizeof(buf))) > 0) {
      out.append(buf, static_cast<size_t>(n));
    }
  }
  ERR_clear_error();
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
