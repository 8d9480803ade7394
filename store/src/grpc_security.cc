#include "muster/store/grpc_security.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/client_interceptor.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "muster/common/logging.h"
#include "muster/platform/env.h"
#include "muster/platform/files.h"
#include "muster/platform/socket.h"

namespace muster::store {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", what, " ", path,
                                            ": ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();  // NOLINT(runtime/int)
  ERR_clear_error();
  if (e == 0) return "not PEM";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

using BioPtr = std::unique_ptr<BIO, decltype(&BIO_free)>;
using X509Ptr = std::unique_ptr<X509, decltype(&X509_free)>;
using KeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

BioPtr MemBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())),
                &BIO_free);
}

absl::StatusOr<X509Ptr> ParseCert(const std::string& path,
                                  absl::string_view flag) {
  absl::StatusOr<std::string> pem = ReadFile(path, flag);
  if (!pem.ok())
    return absl::InvalidArgumentError(absl::StrCat(pem.status().message()));
  BioPtr bio = MemBio(*pem);
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr),
               &X509_free);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " ", path, " is not a PEM certificate (", OpenSslError(), ")"));
  }
  if (X509_cmp_current_time(X509_get0_notAfter(cert.get())) < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " ", path,
        " has expired; make a new one (docs/security.md shows the openssl "
        "commands)"));
  }
  return cert;
}

absl::StatusOr<KeyPtr> ParseKey(const std::string& path,
                                absl::string_view flag) {
  absl::StatusOr<std::string> pem = ReadFile(path, flag);
  if (!pem.ok())
    return absl::InvalidArgumentError(absl::StrCat(pem.status().message()));
  BioPtr bio = MemBio(*pem);
  KeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr),
             &EVP_PKEY_free);
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " ", path, " is not an unencrypted PEM private key (",
        OpenSslError(), ")"));
  }
  return key;
}

absl::Status CheckPair(const std::string& cert_path,
                       const std::string& key_path, absl::string_view cert_flag,
                       absl::string_view key_flag) {
  absl::StatusOr<X509Ptr> cert = ParseCert(cert_path, cert_flag);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<KeyPtr> key = ParseKey(key_path, key_flag);
  if (!key.ok()) return key.status();
  if (X509_check_private_key(cert->get(), key->get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat(key_flag, " ", key_path, " is not the key of ", cert_flag,
                     " ", cert_path,
                     "; pass the key the certificate was "
                     "made for"));
  }
  return absl::OkStatus();
}

// Adds `authorization: Bearer TOKEN` to every call of a channel.
class BearerInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerInterceptor(std::shared_ptr<const std::string> value)
      : value_(std::move(value)) {}
  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kAuthorizationHeader, *value_);
    }
    methods->Proceed();
  }

 private:
  const std::shared_ptr<const std::string> value_;
};

class BearerInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerInterceptorFactory(const std::string& token)
      : value_(std::make_shared<const std::string>(
            absl::StrCat(kBearerPrefix, token))) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new BearerInterceptor(value_);
  }

 private:
  const std::shared_ptr<const std::string> value_;
};

// Writes `data` to `path` atomically (a temporary file, then rename), mode
// 0600.
absl::Status WritePrivate(const std::string& path, const std::string& data) {
  return platform::WriteFileAtomically(path, data, 0600);
}

}  // namespace

absl::Status ClientSecurity::Validate() const {
  if (tls_cert.empty() != tls_key.empty()) {
    return absl::InvalidArgumentError(
        "rdzv-conf tls_cert and tls_key go together (a client certificate and "
        "its key, for musterd --tls-client-ca); pass both or neither");
  }
  if (!tls_cert.empty() && tls_ca.empty()) {
    return absl::InvalidArgumentError(
        "rdzv-conf tls_cert/tls_key need tls_ca (the CA that signed musterd's "
        "certificate): a client certificate is used only over TLS");
  }
  if (!tls_ca.empty()) {
    absl::StatusOr<X509Ptr> ca = ParseCert(tls_ca, "rdzv-conf tls_ca");
    if (!ca.ok()) return ca.status();
  }
  if (!tls_cert.empty()) {
    return CheckPair(tls_cert, tls_key, "rdzv-conf tls_cert",
                     "rdzv-conf tls_key");
  }
  return absl::OkStatus();
}

ClientSecurity StoreSecurityFromEnv() {
  auto get = [](const char* name) {
    return platform::GetEnv(name).value_or("");
  };
  ClientSecurity s;
  s.token = get(kStoreTokenEnv);
  s.tls_ca = get(kStoreTlsCaEnv);
  s.tls_cert = get(kStoreTlsCertEnv);
  s.tls_key = get(kStoreTlsKeyEnv);
  return s;
}

absl::Status ValidateServerTls(const ServerTls& tls) {
  if (tls.cert.empty() != tls.key.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key go together: pass musterd's certificate and "
        "its private key");
  }
  if (!tls.client_ca.empty() && tls.cert.empty()) {
    return absl::InvalidArgumentError(
        "--tls-client-ca needs --tls-cert and --tls-key: client certificates "
        "are checked only over TLS");
  }
  if (tls.cert.empty()) return absl::OkStatus();
  absl::Status pair = CheckPair(tls.cert, tls.key, "--tls-cert", "--tls-key");
  if (!pair.ok()) return pair;
  if (!tls.client_ca.empty()) {
    absl::StatusOr<X509Ptr> ca = ParseCert(tls.client_ca, "--tls-client-ca");
    if (!ca.ok()) return ca.status();
  }
  return absl::OkStatus();
}

TlsProbe ProbeTls(const std::string& host, int port, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  // Closed when it goes out of scope, after SSL_free.
  absl::StatusOr<platform::Socket> socket =
      platform::ConnectTcpBlocking(host, port, deadline, "TLS probe");
  if (!socket.ok()) return TlsProbe::kUnknown;
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return TlsProbe::kUnknown;
  SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  SSL* ssl = SSL_new(ctx);
  static const unsigned char kAlpn[] = {2, 'h', '2'};
  SSL_set_alpn_protos(ssl, kAlpn, sizeof(kAlpn));
  // A SOCKET fits an int on Windows, as OpenSSL takes it there.
  SSL_set_fd(ssl, static_cast<int>(socket->handle()));
  const int r = SSL_connect(ssl);
  TlsProbe out = TlsProbe::kPlaintext;
  if (r == 1) {
    out = TlsProbe::kTls;
  } else {
    // A TLS server that refuses us still answers in TLS: an alert.
    for (unsigned long e = ERR_get_error(); e != 0;  // NOLINT(runtime/int)
         e = ERR_get_error()) {
      const char* reason = ERR_reason_error_string(e);
      if (reason != nullptr && std::strstr(reason, "alert") != nullptr)
        out = TlsProbe::kTls;
    }
  }
  ERR_clear_error();
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  return out;
}

std::vector<std::string> AuthorizationOf(
    const grpc::ServerContextBase& context) {
  const auto& md = context.client_metadata();
  auto range = md.equal_range(kAuthorizationHeader);
  std::vector<std::string> values;
  for (auto it = range.first; it != range.second; ++it)
    values.emplace_back(it->second.data(), it->second.size());
  return values;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> NewSecureMusterChannel(
    const HostPort& target, const ClientSecurity& security) {
  absl::Status valid = security.Validate();
  if (!valid.ok()) return valid;
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (security.tls()) {
    grpc::SslCredentialsOptions ssl;
    absl::StatusOr<std::string> ca = ReadFile(security.tls_ca, "tls_ca");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
    if (!security.tls_cert.empty()) {
      absl::StatusOr<std::string> cert =
          ReadFile(security.tls_cert, "tls_cert");
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadFile(security.tls_key, "tls_key");
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *cert;
      ssl.pem_private_key = *key;
    }
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10'000);
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  if (!security.token.empty()) {
    interceptors.push_back(
        std::make_unique<BearerInterceptorFactory>(security.token));
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      target.ToString(), creds, args, std::move(interceptors));
}

std::string DescribeTlsMismatch(const HostPort& target, bool client_tls,
                                absl::Duration timeout) {
  const TlsProbe probe = ProbeTls(target.host, target.port, timeout);
  const std::string where = target.ToString();
  if (probe == TlsProbe::kTls && !client_tls) {
    return absl::StrCat(
        "musterd at ", where,
        " speaks TLS and this client connects in plaintext — pass "
        "--rdzv-conf=tls_ca=CA.pem (the CA that signed musterd's "
        "certificate; also PET_RDZV_CONF, or MUSTER_STORE_TLS_CA for a "
        "worker)");
  }
  if (probe == TlsProbe::kPlaintext && client_tls) {
    return absl::StrCat(
        "this client uses TLS (tls_ca) but musterd at ", where,
        " speaks plaintext (no TLS) — start musterd with --tls-cert and "
        "--tls-key, or drop tls_ca");
  }
  if (probe == TlsProbe::kTls && client_tls) {
    return absl::StrCat(
        "the TLS handshake with musterd at ", where,
        " failed — check that tls_ca signed musterd's certificate, that the "
        "certificate names ",
        target.host,
        " (subjectAltName), and whether musterd requires a client certificate "
        "(--tls-client-ca: pass tls_cert and tls_key); `openssl s_client "
        "-connect ",
        where, " -CAfile CA.pem` shows the details");
  }
  return "";
}

// ---------------------------------------------------------------- server

absl::StatusOr<std::unique_ptr<ServerTlsCredentials>>
ServerTlsCredentials::Create(ServerTls tls) {
  absl::Status valid = ValidateServerTls(tls);
  if (!valid.ok()) return valid;
  // systemd's RuntimeDirectory=, else the temporary directory (TMPDIR, else
  // /tmp; on Windows %TEMP%).
  const std::string base = platform::GetEnv("RUNTIME_DIRECTORY").value_or("");
  absl::StatusOr<std::string> tls_dir =
      platform::MakeTempDirectory("musterd-tls-", base);
  if (!tls_dir.ok()) {
    return absl::InternalError(absl::StrCat(
        "cannot make a private directory for the TLS files: ",
        tls_dir.status().message(), " (set TMPDIR to a writable directory)"));
  }
  std::unique_ptr<ServerTlsCredentials> out(
      new ServerTlsCredentials(std::move(tls), *tls_dir));
  absl::MutexLock lock(&out->mu_);
  absl::Status copied = out->CopyFiles();
  if (!copied.ok()) return copied;
  const std::string dir = out->dir_;
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider;
  // gRPC checks the copies every second: a Reload is in use within 1 s.
  if (out->tls_.client_ca.empty()) {
    provider =
        std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
            dir + "/key.pem", dir + "/cert.pem", 1);
  } else {
    provider =
        std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
            dir + "/key.pem", dir + "/cert.pem", dir + "/ca.pem", 1);
  }
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (out->tls_.client_ca.empty()) {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    options.watch_root_certs();
    options.set_cert_request_type(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  out->credentials_ = grpc::experimental::TlsServerCredentials(options);
  return out;
}

ServerTlsCredentials::ServerTlsCredentials(ServerTls tls, std::string dir)
    : tls_(std::move(tls)), dir_(std::move(dir)) {}

ServerTlsCredentials::~ServerTlsCredentials() {
  std::error_code ignored;
  for (const char* f : {"/key.pem", "/cert.pem", "/ca.pem"})
    std::filesystem::remove(dir_ + f, ignored);
  std::filesystem::remove(dir_, ignored);
}

absl::Status ServerTlsCredentials::CopyFiles() {
  struct File {
    const std::string& from;
    const char* to;
    const char* flag;
  };
  std::vector<File> files = {{tls_.key, "/key.pem", "--tls-key"},
                             {tls_.cert, "/cert.pem", "--tls-cert"}};
  if (!tls_.client_ca.empty())
    files.push_back({tls_.client_ca, "/ca.pem", "--tls-client-ca"});
  // Read all first: a file that went missing leaves every copy as it was.
  std::vector<std::string> data;
  for (const File& f : files) {
    absl::StatusOr<std::string> text = ReadFile(f.from, f.flag);
    if (!text.ok()) return text.status();
    data.push_back(*std::move(text));
  }
  for (size_t i = 0; i < files.size(); ++i) {
    absl::Status s = WritePrivate(dir_ + files[i].to, data[i]);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ServerTlsCredentials::Reload() {
  absl::Status valid = ValidateServerTls(tls_);
  if (!valid.ok()) return valid;
  absl::MutexLock lock(&mu_);
  return CopyFiles();
}

}  // namespace muster::store
