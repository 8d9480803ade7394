#include "muster/rendezvous/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "muster/platform/host.h"
#include "muster/platform/logging.h"

namespace muster::rendezvous {
namespace {

constexpr char kStoreCredentialPrefix[] = "mst1.";
constexpr char kStoreCredentialContext[] = "muster store v1\n";

std::string Hex(const uint8_t* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 0xf];
  }
  return out;
}

// Constant-time comparison of two strings of possibly different lengths: the
// length is not secret (credentials have a fixed form), the content is.
bool StringEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string TokenHint() {
  return "set MUSTER_RDZV_TOKEN or --rdzv-conf=token_file=FILE on every agent "
         "of the job";
}

}  // namespace

Digest HashSecret(absl::string_view secret) {
  Digest d{};
  // OpenSSL's low-level SHA-256, not SHA256() or EVP: those fetch the digest
  // from a provider, and the first fetch initialises OpenSSL (providers, name
  // maps, its config file), more CPU than the rest of a standalone launch's
  // rendezvous. Deprecated in OpenSSL 3, still built in; the digest is the
  // same.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, secret.data(), secret.size());
  SHA256_Final(d.data(), &ctx);
#pragma GCC diagnostic pop
  return d;
}

bool SecretEquals(const Digest& a, const Digest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string NewRandomSecret() {
  uint8_t bytes[32];
  // The OS's generator, not OpenSSL's: see platform::RandomBytes.
  if (absl::Status s = platform::RandomBytes(bytes, sizeof(bytes)); !s.ok()) {
    // The process cannot make any secret at all. Never fall back to a weak
    // one.
    MUSTER_LOG(ERROR) << "cannot make a random secret: " << s.message();
    std::abort();
  }
  return Hex(bytes, sizeof(bytes));
}

std::string DeriveStoreCredential(const Digest& job_token_digest,
                                  absl::string_view store_prefix) {
  const std::string msg = absl::StrCat(kStoreCredentialContext, store_prefix);
  uint8_t mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  HMAC(EVP_sha256(), job_token_digest.data(),
       static_cast<int>(job_token_digest.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), mac,
       &mac_len);
  return absl::StrCat(kStoreCredentialPrefix, Hex(mac, mac_len));
}

absl::StatusOr<std::string> CleanToken(std::string token,
                                       absl::string_view source) {
  if (absl::EndsWith(token, "\n")) token.pop_back();
  if (absl::EndsWith(token, "\r")) token.pop_back();
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the job token from ", source,
                     " is empty; make one with `openssl rand -hex 32`"));
  }
  for (char c : token) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the token from ", source,
          " holds whitespace or control characters; a token is one line of "
          "printable characters (make one with `openssl rand -hex 32`)"));
    }
  }
  if (token.size() < kMinTokenLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the token from ", source, " has ", token.size(),
        " characters; at least ", kMinTokenLength,
        " are needed so that it cannot be guessed (make one with `openssl "
        "rand -hex 32`)"));
  }
  return token;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    const std::string why = std::strerror(err);
    if (err == EACCES) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot read the token file ", path, ": ", why));
    }
    return absl::NotFoundError(
        absl::StrCat("cannot read the token file ", path, ": ", why));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return CleanToken(text.str(), absl::StrCat("the file ", path));
}

Credential ParseAuthorization(const std::string* values, int count) {
  Credential c;
  if (count == 0) return c;
  c.kind = Credential::Kind::kMalformed;
  if (count > 1) return c;
  absl::string_view v = values[0];
  if (!absl::ConsumePrefix(&v, store::kBearerPrefix)) return c;
  if (v.empty()) return c;
  c.kind = Credential::Kind::kBearer;
  c.secret = std::string(v);
  return c;
}

absl::string_view JobOfStorePrefix(absl::string_view store_prefix) {
  const size_t slash = store_prefix.rfind('/');
  if (slash == absl::string_view::npos) return store_prefix;
  return store_prefix.substr(0, slash);
}

// clang-format off
// The table, one row per case (first match wins):
//
//  credential   | job binding | access        | outcome
//  -------------+-------------+---------------+-----------------------------------
//  malformed    | any         | any           | UNAUTHENTICATED (malformed header)
//  any          | NoToken     | Join          | OK without a token; PERMISSION_DENIED with one
//  any          | NoToken     | Status, Store | OK (as before tokens existed)
//  none         | Unbound     | Join          | UNAUTHENTICATED with --require-token, else OK
//  any          | Unbound     | Status        | OK (the job is unknown: nothing to see)
//  none         | Unbound     | Store         | UNAUTHENTICATED with --require-token, else OK
//  token        | Unbound     | Store         | PERMISSION_DENIED with --require-token, else OK
//  token        | Unbound     | Join          | OK (binds)
//  none         | Token       | any           | UNAUTHENTICATED
//  job token    | Token       | any           | OK
//  round cred.  | Token       | Store (its own round's prefix) | OK
//  admin token  | Token       | Status        | OK
//  other        | Token       | any           | PERMISSION_DENIED
// clang-format on
absl::Status Decide(const AuthPolicy& policy, const Credential& credential,
                    Access access, absl::string_view job_id,
                    const JobBinding& job, absl::string_view store_prefix) {
  using Kind = Credential::Kind;
  using State = JobBinding::State;
  if (credential.kind == Kind::kMalformed) {
    return absl::UnauthenticatedError(absl::StrCat(
        "malformed authorization metadata for job ", job_id,
        ": muster expects exactly one 'authorization: Bearer TOKEN'"));
  }
  const bool has_token = credential.kind == Kind::kBearer;
  switch (job.state) {
    case State::kNoToken:
      if (access == Access::kJoin && has_token) {
        return absl::PermissionDeniedError(absl::StrCat(
            "job ", job_id,
            " was started without a token but this agent presents one; give "
            "every agent of the job the same token (or none), or use another "
            "--rdzv-id"));
      }
      return absl::OkStatus();
    case State::kUnbound:
      switch (access) {
        case Access::kStatus:
          return absl::OkStatus();
        case Access::kJoin:
          if (!has_token && policy.require_token) {
            return absl::UnauthenticatedError(absl::StrCat(
                "this musterd requires a job token (--require-token) and the "
                "Join for job ",
                job_id, " has none; ", TokenHint()));
          }
          return absl::OkStatus();
        case Access::kStore:
          if (!policy.require_token) return absl::OkStatus();
          if (!has_token) {
            return absl::UnauthenticatedError(absl::StrCat(
                "this musterd requires a job token (--require-token) and the "
                "Store call in namespace '",
                store_prefix, "' has none"));
          }
          return absl::PermissionDeniedError(absl::StrCat(
              "no job owns the store namespace '", store_prefix, "' (job ",
              job_id,
              " is not running here); the Store serves only the rounds of "
              "jobs that joined"));
      }
      break;
    case State::kToken: {
      if (!has_token) {
        return absl::UnauthenticatedError(
            absl::StrCat("job ", job_id, " requires its token; ", TokenHint(),
                         access == Access::kStore
                             ? " (workers get MUSTER_STORE_TOKEN from their "
                               "agent)"
                             : ""));
      }
      if (SecretEquals(HashSecret(credential.secret), job.digest)) {
        return absl::OkStatus();
      }
      if (access == Access::kStore &&
          StringEquals(credential.secret,
                       DeriveStoreCredential(job.digest, store_prefix))) {
        return absl::OkStatus();
      }
      if (access == Access::kStatus && policy.admin_digest.has_value() &&
          SecretEquals(HashSecret(credential.secret), *policy.admin_digest)) {
        return absl::OkStatus();
      }
      return absl::PermissionDeniedError(
          absl::StrCat("the token presented is not job ", job_id,
                       "'s; check MUSTER_RDZV_TOKEN / token_file"));
    }
  }
  return absl::InternalError("unreachable authorization state");
}

absl::Status JobAuthRegistry::Check(const Credential& credential, Access access,
                                    absl::string_view job_id,
                                    absl::string_view store_prefix) const {
  return Decide(policy_, credential, access, job_id, Lookup(job_id),
                store_prefix);
}

absl::Status JobAuthRegistry::CheckStore(const Credential& credential,
                                         absl::string_view store_prefix) const {
  return Check(credential, Access::kStore, JobOfStorePrefix(store_prefix),
               store_prefix);
}

absl::Status JobAuthRegistry::CheckStore(
    absl::Span<const std::string> authorization,
    const std::string& store_prefix) const {
  return CheckStore(ParseAuthorization(authorization.data(),
                                       static_cast<int>(authorization.size())),
                    store_prefix);
}

void JobAuthRegistry::Bind(absl::string_view job_id,
                           const Credential& credential) {
  absl::MutexLock lock(&mu_);
  auto [it, created] = jobs_.try_emplace(std::string(job_id));
  if (!created) return;
  if (credential.kind == Credential::Kind::kBearer) {
    it->second.state = JobBinding::State::kToken;
    it->second.digest = HashSecret(credential.secret);
  } else {
    it->second.state = JobBinding::State::kNoToken;
  }
}

void JobAuthRegistry::Forget(absl::string_view job_id_or_prefix) {
  absl::string_view job = job_id_or_prefix;
  absl::ConsumeSuffix(&job, "/");
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job);
  if (it != jobs_.end()) jobs_.erase(it);
}

void JobAuthRegistry::Restore(absl::string_view job_id,
                              const JobBinding& binding) {
  if (binding.state == JobBinding::State::kUnbound) return;
  absl::MutexLock lock(&mu_);
  jobs_[std::string(job_id)] = binding;
}

int64_t JobAuthRegistry::Size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(jobs_.size());
}

JobBinding JobAuthRegistry::Lookup(absl::string_view job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? JobBinding{} : it->second;
}

}  // namespace muster::rendezvous
