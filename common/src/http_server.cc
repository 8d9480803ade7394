#include "muster/common/http_server.h"

#include <civetweb.h>

#include <fstream>
#include <mutex>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "muster/common/net.h"

// MUSTER_HTTP_TLS: civetweb takes an SSL_CTX made here with the OpenSSL muster
// links; a build without it answers UNIMPLEMENTED for HTTPS.
// MUSTER_CIVETWEB_LINKS_OPENSSL (Windows): civetweb was built against that
// same OpenSSL (scripts/build-windows.sh), so nothing is loaded at run time.
#ifdef MUSTER_HTTP_TLS
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#ifndef MUSTER_CIVETWEB_LINKS_OPENSSL
#include <filesystem>

#include "muster/platform/dynamic_library.h"
#include "muster/platform/launch_os.h"
#endif
#endif

namespace muster {
namespace {

// What to do when civetweb cannot start TLS.
#ifdef MUSTER_CIVETWEB_LINKS_OPENSSL
constexpr char kOpenSslHint[] = "";
#else
constexpr char kOpenSslHint[] =
    " (Debian's civetweb loads OpenSSL as libssl.so and libcrypto.so: "
    "apt-get install libssl-dev)";
#endif

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
  // Formatted here, not by mg_printf: MinGW's printf family (msvcrt) has no
  // %zu.
  const std::string header = absl::StrCat(
      "HTTP/1.1 ", r.status, " ", mg_get_response_code_text(conn, r.status),
      "\r\nContent-Type: ", r.content_type,
      "\r\nContent-Length: ", r.body.size(),
      "\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
      "Referrer-Policy: no-referrer\r\n",
      extra, "Connection: close\r\n\r\n");
  mg_write(conn, header.data(), header.size());
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

#ifdef MUSTER_HTTP_TLS
std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no details from OpenSSL";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  if (in) text << in.rdbuf();
  if (!in || text.str().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the HTTPS ", what, " from ", path,
                     ": check the path and that musterd may read it"));
  }
  return text.str();
}

#ifdef MUSTER_CIVETWEB_LINKS_OPENSSL
absl::Status LoadCivetwebOpenSsl() { return absl::OkStatus(); }
#else
// Debian 12's civetweb loads OpenSSL by the names "libssl.so" and
// "libcrypto.so" and looks up a function OpenSSL 3 renamed; these two
// libraries (civetweb_openssl/) carry those sonames and lead its lookups to
// OpenSSL 3. Loaded once, before civetweb starts TLS; found in lib/muster/tls
// beside the program's bin/ (the build tree's layout and the package's).
absl::Status LoadCivetwebOpenSsl() {
  static const absl::Status* loaded = [] {
    const std::filesystem::path dir =
        std::filesystem::path(platform::os::LauncherPath()).parent_path() /
        ".." / "lib" / "muster" / "tls";
    for (const char* name :
         {"libmuster-civetweb-libcrypto.so", "libmuster-civetweb-libssl.so"}) {
      const std::string path = (dir / name).lexically_normal().string();
      if (auto lib = platform::DynamicLibrary::Load(path); !lib.ok()) {
        return new absl::Status(absl::UnavailableError(absl::StrCat(
            "cannot serve HTTPS: ", lib.status().message(),
            " (civetweb reaches OpenSSL 3 through it; reinstall muster, or "
            "build the target muster_civetweb_libssl)")));
      }
    }
    return new absl::Status();
  }();
  return *loaded;
}
#endif

// A certificate chain and its key, parsed; immutable once made. The handshake
// callback takes references of its own, so a reload may drop it any time.
struct TlsPair {
  X509* leaf = nullptr;
  STACK_OF(X509) * chain = nullptr;  // the intermediates after the leaf
  EVP_PKEY* key = nullptr;
  TlsPair() = default;
  TlsPair(const TlsPair&) = delete;
  TlsPair& operator=(const TlsPair&) = delete;
  ~TlsPair() {
    X509_free(leaf);
    sk_X509_pop_free(chain, X509_free);
    EVP_PKEY_free(key);
  }
};

absl::StatusOr<std::shared_ptr<const TlsPair>> LoadTlsPair(
    const HttpTlsFiles& files) {
  absl::StatusOr<std::string> cert = ReadPem(files.cert, "certificate");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem(files.key, "private key");
  if (!key.ok()) return key.status();
  auto pair = std::make_shared<TlsPair>();
  BIO* bio = BIO_new_mem_buf(cert->data(), static_cast<int>(cert->size()));
  pair->leaf = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  pair->chain = sk_X509_new_null();
  while (pair->leaf != nullptr) {
    X509* next = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    if (next == nullptr) break;
    sk_X509_push(pair->chain, next);
  }
  BIO_free(bio);
  ERR_clear_error();  // the end of the chain reads as an error
  if (pair->leaf == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no PEM certificate in ", files.cert,
        " (--tls-cert): give the server's certificate chain in PEM"));
  }
  bio = BIO_new_mem_buf(key->data(), static_cast<int>(key->size()));
  pair->key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  OPENSSL_cleanse(key->data(), key->size());
  if (pair->key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no PEM private key in ", files.key, " (--tls-key): ", OpenSslError(),
        "; an encrypted key is not supported"));
  }
  if (X509_check_private_key(pair->leaf, pair->key) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "the private key in ", files.key, " does not match the certificate in ",
        files.cert, ": give the key the certificate was issued for"));
  }
  return std::shared_ptr<const TlsPair>(std::move(pair));
}

// The SSL_CTX civetweb serves with. The certificate is chosen per handshake
// (SSL_CTX_set_cert_cb) from the current pair, so that a reload (SIGHUP)
// takes effect for new connections without restarting the server.
class TlsContext {
 public:
  static absl::StatusOr<std::unique_ptr<TlsContext>> Create(
      HttpTlsFiles files) {
    absl::StatusOr<std::shared_ptr<const TlsPair>> pair = LoadTlsPair(files);
    if (!pair.ok()) return pair.status();
    if (absl::Status s = LoadCivetwebOpenSsl(); !s.ok()) return s;
    SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == nullptr) {
      return absl::InternalError(
          absl::StrCat("cannot make a TLS context: ", OpenSslError()));
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
                                 SSL_OP_CIPHER_SERVER_PREFERENCE);
    auto self = std::unique_ptr<TlsContext>(
        new TlsContext(std::move(files), ctx, *std::move(pair)));
    SSL_CTX_set_cert_cb(ctx, &TlsContext::ChooseCertificate, self.get());
    return self;
  }
  ~TlsContext() { SSL_CTX_free(ctx_); }
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  SSL_CTX* ctx() const { return ctx_; }

  absl::Status Reload() {
    absl::StatusOr<std::shared_ptr<const TlsPair>> pair = LoadTlsPair(files_);
    if (!pair.ok()) return pair.status();
    absl::MutexLock lock(&mu_);
    pair_ = *std::move(pair);
    return absl::OkStatus();
  }

 private:
  TlsContext(HttpTlsFiles files, SSL_CTX* ctx,
             std::shared_ptr<const TlsPair> pair)
      : files_(std::move(files)), ctx_(ctx), pair_(std::move(pair)) {}

  static int ChooseCertificate(SSL* ssl, void* arg) {
    auto* self = static_cast<TlsContext*>(arg);
    std::shared_ptr<const TlsPair> pair;
    {
      absl::MutexLock lock(&self->mu_);
      pair = self->pair_;
    }
    // Each call takes references of its own: the pair may go at a reload.
    return SSL_use_certificate(ssl, pair->leaf) == 1 &&
                   SSL_set1_chain(ssl, pair->chain) == 1 &&
                   SSL_use_PrivateKey(ssl, pair->key) == 1
               ? 1
               : 0;
  }

  const HttpTlsFiles files_;
  SSL_CTX* const ctx_;
  absl::Mutex mu_;
  std::shared_ptr<const TlsPair> pair_ ABSL_GUARDED_BY(mu_);
};
#else
class TlsContext {
 public:
  static absl::StatusOr<std::unique_ptr<TlsContext>> Create(HttpTlsFiles) {
    return absl::UnimplementedError(
        "this build's HTTP server has no TLS: serve --http-listen on a "
        "loopback or private address, or behind a TLS proxy");
  }
  void* ctx() const { return nullptr; }
  absl::Status Reload() { return absl::OkStatus(); }
};
#endif

}  // namespace

struct HttpServer::Impl {
  std::map<std::string, HttpHandler> routes;
  mg_context* ctx = nullptr;
  int port = 0;
  std::unique_ptr<TlsContext> tls;
  // civetweb's own messages while it starts (why TLS could not start).
  absl::Mutex log_mu;
  std::string start_log ABSL_GUARDED_BY(log_mu);

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

bool HttpServer::tls() const { return impl_->tls != nullptr; }

absl::Status HttpServer::ReloadTls() {
  if (impl_->tls == nullptr) {
    return absl::FailedPreconditionError(
        "the HTTP listener serves no TLS: nothing to reload");
  }
  return impl_->tls->Reload();
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& listen, std::map<std::string, HttpHandler> routes,
    std::optional<HttpTlsFiles> tls) {
  auto where = ParseHostPort(listen, -1, /*allow_zero_port=*/true);
  if (!where.ok()) return where.status();
  InitCivetwebOnce();
  auto impl = std::make_unique<Impl>();
  impl->routes = std::move(routes);
  if (tls.has_value()) {
    if (mg_check_feature(MG_FEATURES_TLS) == 0) {
      return absl::UnimplementedError(
          "this build's civetweb has no TLS: serve --http-listen on a "
          "loopback or private address, or behind a TLS proxy");
    }
    absl::StatusOr<std::unique_ptr<TlsContext>> context =
        TlsContext::Create(*std::move(tls));
    if (!context.ok()) return context.status();
    impl->tls = *std::move(context);
  }
  // civetweb wants "ADDR:PORT" for IPv4 and "[ADDR]:PORT" with a "+" for dual
  // stack; a bare port listens on every IPv4 address; an "s" after the port
  // serves TLS on it.
  std::string ports =
      absl::StrCat((where->host.empty() || where->host == "0.0.0.0")
                       ? absl::StrCat(where->port)
                       : where->ToString(),
                   impl->tls != nullptr ? "s" : "");
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
  // once. While it starts they are kept: a TLS failure is named by them.
  callbacks.log_message = [](const mg_connection* conn, const char* message) {
    auto* self = static_cast<Impl*>(
        conn != nullptr ? mg_get_user_data(mg_get_context(conn)) : nullptr);
    if (self != nullptr && message != nullptr) {
      absl::MutexLock lock(&self->log_mu);
      if (self->start_log.size() < 4096) {
        absl::StrAppend(&self->start_log, self->start_log.empty() ? "" : "; ",
                        message);
      }
    }
    return 1;
  };
  // The SSL_CTX is ours: civetweb asks at start (and at stop, when a non-zero
  // answer keeps it from freeing the context).
  callbacks.external_ssl_ctx = [](void** ssl_ctx, void* user_data) {
    auto* self = static_cast<Impl*>(user_data);
    if (self == nullptr || self->tls == nullptr) return 0;
    *ssl_ctx = self->tls->ctx();
    return 1;
  };
  impl->ctx = mg_start(&callbacks, impl.get(), options);
  if (impl->ctx == nullptr && impl->tls != nullptr) {
    absl::MutexLock lock(&impl->log_mu);
    if (absl::StrContains(impl->start_log, "load") ||
        absl::StrContains(impl->start_log, "ssl")) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve HTTPS on ", where->ToString(),
                       ": civetweb: ", impl->start_log, kOpenSslHint));
    }
  }
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
