// Authorization for a shared musterd: job tokens, round-scoped Store
// credentials, the admin token and node session secrets. No gRPC here: the
// adapters (Session, GetStatus, Store) parse the `authorization` metadata into
// a Credential and ask Decide / JobAuthRegistry; the Coordinator uses the
// secret helpers for node sessions.
//
// What protects what (see docs/security.md):
//   - A job token binds to its job at the first accepted Join (trust on first
//     use). The server keeps only its SHA-256 and compares digests in constant
//     time. Every later Join, GetStatus of the job and Store call under one of
//     its namespaces must present it.
//   - A round credential (HMAC-SHA256 keyed by the token's digest over the
//     round's store prefix) lets workers use their own round's namespace and
//     nothing else; they never see the job token.
//   - The admin token (musterd --admin-token-file) may see every job's status,
//     nothing more.
//   - Jobs started without a token behave as before (torchrun compatibility)
//     unless musterd runs with --require-token.
//
// The decision table (credential x access x job -> outcome) is Decide below;
// tests/rendezvous/auth_test.cc walks it row by row.
#ifndef MUSTER_RENDEZVOUS_AUTH_H_
#define MUSTER_RENDEZVOUS_AUTH_H_

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "muster/store/service_hooks.h"

namespace muster::rendezvous {

// The gRPC metadata key and scheme a client sends its secret with:
// store::kAuthorizationHeader and store::kBearerPrefix
// (muster/store/service_hooks.h).
// Tokens shorter than this are refused: they could be guessed.
inline constexpr size_t kMinTokenLength = 16;

// A SHA-256 digest. Compared only with SecretEquals.
using Digest = std::array<uint8_t, 32>;

// SHA-256 of `secret`.
Digest HashSecret(absl::string_view secret);
// Constant-time equality (CRYPTO_memcmp).
bool SecretEquals(const Digest& a, const Digest& b);
// 32 random bytes from the OS's CSPRNG, as 64 lowercase hex characters. For
// node session secrets.
std::string NewRandomSecret();

// The Store credential of one round: "mst1." + hex(HMAC-SHA256(key =
// HashSecret(job_token), msg = "muster store v1\n" + store_prefix)). The agent
// gives it to its workers (MUSTER_STORE_TOKEN) instead of the job token; the
// server recomputes it from the digest it keeps.
std::string DeriveStoreCredential(const Digest& job_token_digest,
                                  absl::string_view store_prefix);
inline std::string DeriveStoreCredential(absl::string_view job_token,
                                         absl::string_view store_prefix) {
  return DeriveStoreCredential(HashSecret(job_token), store_prefix);
}

// Checks a token read from a file or the environment: trims one trailing
// newline (files written by `openssl rand -hex 32 > FILE` end with one).
// Errors: INVALID_ARGUMENT when it is empty, shorter than kMinTokenLength, or
// holds whitespace or control characters; the message names `source` (never
// the token).
absl::StatusOr<std::string> CleanToken(std::string token,
                                       absl::string_view source);
// Reads and checks a token file. Errors: NOT_FOUND / PERMISSION_DENIED naming
// the path, or CleanToken's.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// What a caller presented.
struct Credential {
  enum class Kind {
    kNone,       // no authorization metadata
    kBearer,     // "Bearer SECRET"
    kMalformed,  // anything else (another scheme, an empty secret)
  };
  Kind kind = Kind::kNone;
  std::string secret;  // kBearer only; never logged
};

// Parses the values of the authorization metadata (zero, one or more).
// More than one value is malformed.
Credential ParseAuthorization(const std::string* values, int count);

// What the caller asks to do with a job.
enum class Access {
  kJoin,    // a Session's Join (and so everything the stream does after it)
  kStatus,  // GetStatus of the job
  kStore,   // a Store call in one of the job's namespaces
};

// What the server knows of a job's token.
struct JobBinding {
  enum class State {
    kUnbound,  // no Join accepted yet (or the job was forgotten)
    kNoToken,  // started without a token
    kToken,    // started with the token whose digest is `digest`
  };
  State state = State::kUnbound;
  Digest digest{};
};

struct AuthPolicy {
  // musterd --require-token: token-less Joins and Store calls outside any
  // job's namespace are refused.
  bool require_token = false;
  // musterd --admin-token-file: may see every job's status.
  std::optional<Digest> admin_digest;
};

// The decision. `store_prefix` is the namespace of a kStore access (ignored
// otherwise). OK when allowed; otherwise
//   UNAUTHENTICATED: no credential where one is needed, or malformed metadata;
//   PERMISSION_DENIED: a credential that is not the job's.
// The message names the job and the fix, never a secret.
absl::Status Decide(const AuthPolicy& policy, const Credential& credential,
                    Access access, absl::string_view job_id,
                    const JobBinding& job, absl::string_view store_prefix = "");

// The job a store namespace belongs to: "<job>/<round>" -> "<job>" (up to the
// last '/'); a namespace without '/' is its own job id.
absl::string_view JobOfStorePrefix(absl::string_view store_prefix);

// The job -> token bindings of one server. Thread-safe.
//
// Lifetime of a binding: made when the Coordinator accepts the first Join of
// the job (Bind), dropped when the Coordinator forgets the job (Forget, from
// its on_round_end("<job>/") hook). A job's id stays bound to its token while
// the job is known, including its retention after the end. It is the Store
// service's access check too (store::StoreAccess).
class JobAuthRegistry final : public store::StoreAccess {
 public:
  explicit JobAuthRegistry(AuthPolicy policy) : policy_(std::move(policy)) {}

  const AuthPolicy& policy() const { return policy_; }

  // Decide for the job's current binding.
  absl::Status Check(const Credential& credential, Access access,
                     absl::string_view job_id,
                     absl::string_view store_prefix = "") const;
  // For a Store call: the job is JobOfStorePrefix(store_prefix).
  absl::Status CheckStore(const Credential& credential,
                          absl::string_view store_prefix) const;
  // The same for the values of a Store call's `authorization` metadata.
  absl::Status CheckStore(absl::Span<const std::string> authorization,
                          const std::string& store_prefix) const override;
  // Binds an unbound job to the credential (a token, or none). No effect when
  // the job is bound already.
  void Bind(absl::string_view job_id, const Credential& credential);
  // Forgets the binding of the job (a store prefix "<job>/" is accepted too).
  void Forget(absl::string_view job_id_or_prefix);
  // Bound jobs, for tests and metrics.
  int64_t Size() const;

  // A replica (musterd --etcd-endpoints) keeps each job's binding (a digest,
  // never a token) with the job in etcd, and a new leader restores it, so a
  // job's token stays its own across a failover.
  JobBinding BindingOf(absl::string_view job_id) const {
    return Lookup(job_id);
  }
  void Restore(absl::string_view job_id, const JobBinding& binding);

 private:
  JobBinding Lookup(absl::string_view job_id) const;

  const AuthPolicy policy_;
  mutable absl::Mutex mu_;
  std::map<std::string, JobBinding, std::less<>> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_AUTH_H_
