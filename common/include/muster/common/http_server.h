// HttpServer: a small HTTP endpoint for probes, metrics and musterd's console
// API (/healthz, /readyz, /metrics, /api/v1/...), over civetweb from Debian.
// musterd serves it on --http-listen; the agent on --health-port.
#ifndef MUSTER_COMMON_HTTP_SERVER_H_
#define MUSTER_COMMON_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace muster {

// What a handler sees of a request. Header names are lowercase; a header sent
// twice keeps its last value. The path is decoded, without the query.
struct HttpRequest {
  std::string method;
  std::string path;
  std::string query;  // raw, after '?', "" when none
  std::map<std::string, std::string> headers;

  // The value of header `name` (lowercase), or "" when absent.
  std::string Header(const std::string& name) const;
  // The decoded value of query parameter `name`, or "" when absent.
  std::string QueryParam(const std::string& name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // Sent after the standard ones (Content-Type, Content-Length, the security
  // headers every response carries). E.g. {"WWW-Authenticate", "Bearer"}.
  std::vector<std::pair<std::string, std::string>> headers = {};
};

// Called on one of the server's threads for each GET of its path; must be
// thread-safe.
using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

// HTTPS: the PEM files of the certificate chain and of its private key
// (musterd's --tls-cert and --tls-key).
struct HttpTlsFiles {
  std::string cert;
  std::string key;
};

// Thread-safe. Serves until destroyed.
class HttpServer {
 public:
  // Listens on `listen` (HOST:PORT; port 0 picks one) and serves `routes`:
  // a key is an exact path, or a prefix when it ends in '/' and is not "/"
  // ("/api/v1/jobs/" serves "/api/v1/jobs/abc"); the exact match wins, then
  // the longest prefix. Other paths get 404 with the list of paths; methods
  // other than GET and HEAD get 405. Every response carries
  // X-Content-Type-Options: nosniff, Referrer-Policy: no-referrer and
  // Cache-Control: no-store. Errors: INVALID_ARGUMENT for a malformed
  // address; UNAVAILABLE naming the address (and the holder of the port, when
  // known) when it cannot bind.
  //
  // With `tls`, serves HTTPS only (TLS 1.2 or newer): INVALID_ARGUMENT naming
  // the file when a PEM file cannot be read or the key does not match the
  // certificate; UNIMPLEMENTED when this build's HTTP server has no TLS;
  // UNAVAILABLE when civetweb cannot load OpenSSL (Debian's civetweb loads
  // libssl.so by that name, which libssl-dev provides).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& listen, std::map<std::string, HttpHandler> routes,
      std::optional<HttpTlsFiles> tls = std::nullopt);
  // Stops serving; waits for requests in progress.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The bound port.
  int port() const;
  // Whether it serves HTTPS.
  bool tls() const;
  // Reads the TLS files again; new connections use them, and on error the
  // old pair stays in use. FAILED_PRECONDITION without TLS.
  absl::Status ReloadTls();

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Escapes a Prometheus label value (backslash, double quote, newline).
std::string PrometheusLabel(const std::string& value);

}  // namespace muster

#endif  // MUSTER_COMMON_HTTP_SERVER_H_
