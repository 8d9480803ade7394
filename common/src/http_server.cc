#include "muster/common/http_server.h"

#include <civetweb.h>

#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "muster/common/net.h"

namespace muster {
namespace {

void InitCivetwebOnce() {
  static std::once_flag once;
  std::call_once(once, [] { mg_init_library(0); });
}

void Send(mg_connection* conn, const HttpResponse& r) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            r.status, mg_get_response_code_text(conn, r.status),
            r.content_type.c_str(), r.body.size());
  mg_write(conn, r.body.data(), r.body.size());
}

}  // namespace

struct HttpServer::Impl {
  std::map<std::string, HttpHandler> routes;
  mg_context* ctx = nullptr;
  int port = 0;

  static int Handle(mg_connection* conn, void* data) {
    auto* self = static_cast<Impl*>(data);
    const mg_request_info* info = mg_get_request_info(conn);
    std::string path = info->local_uri != nullptr ? info->local_uri : "/";
    auto it = self->routes.find(path);
    if (it == self->routes.end()) {
      std::vector<std::string> paths;
      for (const auto& [p, unused] : self->routes) paths.push_back(p);
      Send(conn, {404, "text/plain; charset=utf-8",
                  absl::StrCat("no such path: ", path, "; try ",
                               absl::StrJoin(paths, ", "), "\n")});
      return 404;
    }
    HttpResponse r = it->second();
    Send(conn, r);
    return r.status;
  }
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() {
  if (impl_->ctx != nullptr) mg_stop(impl_->ctx);
}

int HttpServer::port() const { return impl_->port; }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& listen, std::map<std::string, HttpHandler> routes) {
  auto where = ParseHostPort(listen, -1, /*allow_zero_port=*/true);
  if (!where.ok()) return where.status();
  InitCivetwebOnce();
  auto impl = std::make_unique<Impl>();
  impl->routes = std::move(routes);
  // civetweb wants "ADDR:PORT" for IPv4 and "[ADDR]:PORT" with a "+" for dual
  // stack; a bare port listens on every IPv4 address.
  std::string ports = (where->host.empty() || where->host == "0.0.0.0")
                          ? absl::StrCat(where->port)
                          : where->ToString();
  // Probes must answer while idle or half-sent connections hold workers (a
  // port scanner, a load balancer's pre-opened pool, a slowloris): enough
  // workers that a few dozen such connections leave most free, and a short
  // request timeout that frees the rest (a probe's request is one small
  // packet). civetweb's threads sleep when idle; their stacks are mostly
  // untouched virtual memory.
  const char* options[] = {"listening_ports",
                           ports.c_str(),
                           "num_threads",
                           "128",
                           "connection_queue",
                           "256",
                           "request_timeout_ms",
                           "1000",
                           "enable_keep_alive",
                           "no",
                           nullptr};
  mg_callbacks callbacks{};
  // civetweb logs its own errors to stderr; the message below says the same,
  // once.
  callbacks.log_message = [](const mg_connection*, const char*) { return 1; };
  impl->ctx = mg_start(&callbacks, nullptr, options);
  if (impl->ctx == nullptr) {
    std::string owner =
        where->port != 0 ? DescribePortOwner(where->port) : std::string();
    return absl::UnavailableError(absl::StrCat(
        "cannot serve HTTP on ", where->ToString(),
        owner.empty()
            ? std::string(
                  ": the port is taken or the address is not on this host")
            : absl::StrCat(": the port is in use by ", owner),
        " — pick another port"));
  }
  mg_set_request_handler(impl->ctx, "/", &Impl::Handle, impl.get());
  mg_server_port bound[4] = {};
  if (mg_get_server_ports(impl->ctx, 4, bound) > 0) impl->port = bound[0].port;
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

}  // namespace muster
