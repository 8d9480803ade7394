#include "muster/common/http_server.h"

#include <civetweb.h>

#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "muster/common/net.h"

namespace muster {
namespace {

void InitCivetwebOnce() {
  static std::once_flag once;
  std::call_once(once, [] { mg_init_library(0); });
}

void Send(mg_connection* conn, const HttpResponse& r, bool head) {
  std::string extra;
  for (const auto& [name, value] : r.headers) {
    absl::StrAppend(&extra, name, ": ", value, "\r\n");
  }
  // nosniff: a body is what its Content-Type says (a worker's error text in
  // a JSON answer never runs as a page); no Referer leaks a console URL.
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
            "Referrer-Policy: no-referrer\r\n%sConnection: close\r\n\r\n",
            r.status, mg_get_response_code_text(conn, r.status),
            r.content_type.c_str(), r.body.size(), extra.c_str());
  if (!head) mg_write(conn, r.body.data(), r.body.size());
}

HttpRequest RequestOf(const mg_request_info* info) {
  HttpRequest request;
  request.method = info->request_method != nullptr ? info->request_method : "";
  request.path = info->local_uri != nullptr ? info->local_uri : "/";
  request.query = info->query_string != nullptr ? info->query_string : "";
  for (int i = 0; i < info->num_headers; ++i) {
    if (info->http_headers[i].name == nullptr) continue;
    request.headers[absl::AsciiStrToLower(info->http_headers[i].name)] =
        info->http_headers[i].value != nullptr ? info->http_headers[i].value
                                               : "";
  }
  return request;
}

}  // namespace

struct HttpServer::Impl {
  std::map<std::string, HttpHandler> routes;
  mg_context* ctx = nullptr;
  int port = 0;

  // The exact route, else the longest prefix route ("/a/b/" serves
  // "/a/b/c"); nullptr when none.
  const HttpHandler* Find(const std::string& path) const {
    auto it = routes.find(path);
    if (it != routes.end()) return &it->second;
    const HttpHandler* best = nullptr;
    size_t best_length = 0;
    for (const auto& [route, handler] : routes) {
      if (route.size() > 1 && route.back() == '/' &&
          absl::StartsWith(path, route) && route.size() > best_length) {
        best = &handler;
        best_length = route.size();
      }
    }
    return best;
  }

  static int Handle(mg_connection* conn, void* data) {
    auto* self = static_cast<Impl*>(data);
    const HttpRequest request = RequestOf(mg_get_request_info(conn));
    const bool head = request.method == "HEAD";
    if (request.method != "GET" && !head) {
      Send(conn,
           {405,
            "text/plain; charset=utf-8",
            absl::StrCat(request.method, " is not served here: GET only\n"),
            {{"Allow", "GET, HEAD"}}},
           false);
      return 405;
    }
    const HttpHandler* handler = self->Find(request.path);
    if (handler == nullptr) {
      std::vector<std::string> paths;
      for (const auto& [p, unused] : self->routes) paths.push_back(p);
      Send(conn,
           {404, "text/plain; charset=utf-8",
            absl::StrCat("no such path: ", request.path, "; try ",
                         absl::StrJoin(paths, ", "), "\n")},
           head);
      return 404;
    }
    HttpResponse r = (*handler)(request);
    Send(conn, r, head);
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
