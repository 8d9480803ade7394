// HttpServer: a small HTTP endpoint for probes and metrics (/healthz, /readyz,
// /metrics), over civetweb from Debian. musterd serves it on --http-listen; the
// agent on --health-port.
#ifndef MUSTER_COMMON_HTTP_SERVER_H_
#define MUSTER_COMMON_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace muster {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Called on one of the server's threads for each GET of its path; must be
// thread-safe.
using HttpHandler = std::function<HttpResponse()>;

// Thread-safe. Serves until destroyed.
class HttpServer {
 public:
  // Listens on `listen` (HOST:PORT; port 0 picks one) and serves `routes`
  // (exact paths). Other paths get 404 with the list of paths. Errors:
  // INVALID_ARGUMENT for a malformed address; UNAVAILABLE naming the address
  // (and the holder of the port, when known) when it cannot bind.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& listen, std::map<std::string, HttpHandler> routes);
  // Stops serving; waits for requests in progress.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The bound port.
  int port() const;

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Escapes a Prometheus label value (backslash, double quote, newline).
std::string PrometheusLabel(const std::string& value);

}  // namespace muster

#endif  // MUSTER_COMMON_HTTP_SERVER_H_
