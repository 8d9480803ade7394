// HttpServer on Windows without civetweb: built only when the MinGW dependency
// prefix has no civetweb (one made before scripts/build-windows.sh built it;
// common/CMakeLists.txt), so that Start refuses with the remedy instead of a
// link error or a silent no-op.
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
bool HttpServer::tls() const { return false; }
absl::Status HttpServer::ReloadTls() {
  return absl::FailedPreconditionError("no HTTP listener in this build");
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& listen, std::map<std::string, HttpHandler> routes,
    std::optional<HttpTlsFiles> tls) {
  (void)routes;
  (void)tls;
  return absl::UnimplementedError(absl::StrCat(
      "cannot serve HTTP on ", listen,
      ": this Windows build of muster has no HTTP endpoint (/healthz, /readyz, "
      "/metrics, the console): its dependency prefix had no civetweb. Run "
      "scripts/build-windows.sh, which builds civetweb into the prefix, and "
      "build again; or drop the flag and probe musterd with grpc.health.v1 "
      "(`muster status`) (docs/windows.md)"));
}

}  // namespace muster
