// GrpcStore: the Store seam over musterd's Store service, bound to one round's
// namespace.
//
// Every call of every thread goes over one bidirectional Store.Stream (ops
// pipelined, batched per write, answered out of order); against an older
// musterd that lacks it (UNIMPLEMENTED) the store falls back to one unary call
// per op. With several replicas listed it talks to the leader: a standby's
// refusal naming the leader (`muster-leader`) sends it there at once, and a
// broken stream or an unreachable replica makes it try the others for up to
// failover_timeout, repeating the ops in flight that are safe to repeat.
#ifndef MUSTER_STORE_GRPC_STORE_H_
#define MUSTER_STORE_GRPC_STORE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "muster/store/security.h"
#include "muster/store/store.h"

namespace muster::store {

struct GrpcStoreOptions {
  // HOST:PORT of musterd (MUSTER_STORE_ENDPOINT), or of every musterd replica,
  // comma-separated: "H1:P1,H2:P2,H3:P3".
  std::string endpoint;
  // The round's namespace (MUSTER_STORE_PREFIX).
  std::string prefix;
  // How long the first call waits for the server to be reachable.
  absl::Duration connect_timeout = absl::Seconds(10);
  // How long the store goes on trying the replicas after its stream broke
  // before the ops in flight fail with UNAVAILABLE. 15 s covers a leader's
  // death noticed through its etcd lease (musterd's replica lease TTL is
  // 10 s) plus an election and the new leader's start, while staying under
  // the 30 s deadline of a call that does not wait, so a worker sees a
  // failover as a slow call rather than an error.
  absl::Duration failover_timeout = absl::Seconds(15);
  // One unary call per op, no stream (the older protocol; for comparisons).
  bool unary = false;
  // A Set or MultiSet whose request was written to a leader that then failed
  // may or may not have been applied. false (the default): it fails with
  // UNAVAILABLE saying so, as every write whose outcome is unknown, and the
  // Store's history stays linearizable (tests/e2e/nemesis_e2e_test.cc checks
  // it). true: it is written again on the next leader, which a key with one
  // writer wants (the comm library's bootstrap keys: a worker then sees a
  // failover as a slow call) and a key written concurrently must not (the
  // repeat can land after another writer's later value). Add, CompareSet and
  // Delete are never repeated: their second answer could differ.
  bool repeat_sets_in_flight = false;
  // TLS and the credential sent on every call (a worker's is its round's
  // MUSTER_STORE_TOKEN; see StoreSecurityFromEnv). Default: plaintext, none.
  ClientSecurity security = {};
};

// Connects (waiting up to connect_timeout for any listed endpoint, then for a
// leader to accept the stream). Errors: INVALID_ARGUMENT for an empty or
// malformed endpoint (list) or an empty prefix; UNAVAILABLE naming the
// endpoints when none can be reached. The store is thread-safe; calls that
// wait block the calling thread only.
//
// A write (Add, CompareSet, Delete; Set and MultiSet unless
// repeat_sets_in_flight) whose request was written to a leader that then
// failed fails with UNAVAILABLE saying so: it may or may not have been
// applied. Reads are repeated on the new leader.
absl::StatusOr<std::unique_ptr<Store>> NewGrpcStore(
    const GrpcStoreOptions& options);

}  // namespace muster::store

#endif  // MUSTER_STORE_GRPC_STORE_H_
