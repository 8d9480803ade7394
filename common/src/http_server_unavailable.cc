// HttpServer on Windows: not built. civetweb (the HTTP endpoint of musterd's
// --http-listen and the agent's --health-port) is not in the Windows
// dependency cache (docs/windows.md), so Start refuses with the alternatives
// instead of a link error or a silent no-op.
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "muster/common/http_server.h"

namespace muster {

struct HttpServer::Impl {
  int port = 0;
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() = default;
int HttpServer::port() const { return impl_->port; }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& listen, std::map<std::string, HttpHandler> routes) {
  (void)routes;
  return absl::UnimplementedError(absl::StrCat(
      "cannot serve HTTP on ", listen,
      ": the Windows build of muster has no HTTP endpoint (/healthz, /readyz, "
      "/metrics; civetweb is not built for Windows). Drop the flag, and probe "
      "musterd with grpc.health.v1 (`muster status`) instead, or run musterd "
      "on Linux for Prometheus metrics (docs/windows.md)"));
}

}  // namespace muster
