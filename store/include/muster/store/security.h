// TLS and tokens for muster's gRPC clients and for musterd. The decisions
// themselves live in auth.h; this is configuration.
#ifndef MUSTER_STORE_SECURITY_H_
#define MUSTER_STORE_SECURITY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace muster::store {

// How a client (the agent, `muster status`, `muster doctor`, libmuster_comm's
// store client) talks to musterd. Plain data; Validate once.
struct ClientSecurity {
  // PEM file of the CA that signed musterd's certificate (rdzv-conf tls_ca).
  // Non-empty turns TLS on; empty is plaintext.
  std::string tls_ca;
  // PEM client certificate and key for musterd --tls-client-ca (mTLS)
  // (rdzv-conf tls_cert, tls_key). Both or neither; only with tls_ca.
  std::string tls_cert;
  std::string tls_key;
  // Sent on every call as `authorization: Bearer TOKEN`: the job token
  // (MUSTER_RDZV_TOKEN, rdzv-conf token_file), a worker's round credential
  // (MUSTER_STORE_TOKEN) or the admin token. Empty: none. Never logged.
  std::string token;

  bool tls() const { return !tls_ca.empty(); }
  // INVALID_ARGUMENT naming the setting: a cert without a key (or the
  // reverse), or a client certificate without tls_ca; NOT_FOUND naming a file
  // that cannot be read.
  absl::Status Validate() const;
};

// The worker side: the Store client of libmuster_comm reads these variables,
// which the agent sets for its workers.
inline constexpr char kStoreTokenEnv[] = "MUSTER_STORE_TOKEN";
inline constexpr char kStoreTlsCaEnv[] = "MUSTER_STORE_TLS_CA";
inline constexpr char kStoreTlsCertEnv[] = "MUSTER_STORE_TLS_CERT";
inline constexpr char kStoreTlsKeyEnv[] = "MUSTER_STORE_TLS_KEY";
// The job token's variable: read by the agent, never passed to workers.
inline constexpr char kRdzvTokenEnv[] = "MUSTER_RDZV_TOKEN";

// ClientSecurity of a worker's Store client, from MUSTER_STORE_TOKEN and
// MUSTER_STORE_TLS_{CA,CERT,KEY} (all optional).
ClientSecurity StoreSecurityFromEnv();

// musterd's TLS (--tls-cert, --tls-key, --tls-client-ca).
struct ServerTls {
  std::string cert;       // PEM certificate chain
  std::string key;        // PEM private key
  std::string client_ca;  // PEM CA; non-empty requires client certificates
  bool enabled() const { return !cert.empty(); }
};

// Checks that the files exist, parse as PEM, and that the key matches the
// certificate. Errors: INVALID_ARGUMENT naming the flag and the file, and the
// fix. Used at start and before a SIGHUP reload takes effect.
absl::Status ValidateServerTls(const ServerTls& tls);

// What speaks on a TCP port, from a TLS handshake attempt without
// verification. Blocks up to `timeout`.
enum class TlsProbe {
  kTls,        // a TLS server answered
  kPlaintext,  // the port accepted TCP but no TLS handshake happened
  kUnknown,    // could not connect
};
TlsProbe ProbeTls(const std::string& host, int port, absl::Duration timeout);

}  // namespace muster::store

#endif  // MUSTER_STORE_SECURITY_H_
