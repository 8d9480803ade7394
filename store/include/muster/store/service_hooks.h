// What the Store service (store_service.h) asks of the server that hosts it:
// who may use a namespace, whether this server may answer now (fencing), and
// where its counts go. musterd implements them (rendezvous/: job tokens, the
// replicas' LeaderGate, its Prometheus metrics); a standalone served store
// (served_store.h) leaves them out and always serves. No gRPC here.
#ifndef MUSTER_STORE_SERVICE_HOOKS_H_
#define MUSTER_STORE_SERVICE_HOOKS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace muster::store {

// The gRPC metadata keys of the Store protocol.
// A caller's secret: `authorization: Bearer TOKEN`.
inline constexpr char kAuthorizationHeader[] = "authorization";
inline constexpr char kBearerPrefix[] = "Bearer ";
// The trailing metadata key that names the leader on a standby's refusal.
inline constexpr char kLeaderMetadataKey[] = "muster-leader";
// The initial metadata key of every Store answer from a replica: the
// leadership's epoch (StoreGate::epoch), decimal.
inline constexpr char kEpochMetadataKey[] = "muster-epoch";

// Who may use a namespace. Thread-safe; never blocks.
class StoreAccess {
 public:
  virtual ~StoreAccess() = default;
  // OK when a caller that sent `authorization` (the values of its
  // `authorization` metadata, usually one) may use the namespace `prefix`;
  // otherwise UNAUTHENTICATED or PERMISSION_DENIED naming why.
  virtual absl::Status CheckStore(absl::Span<const std::string> authorization,
                                  const std::string& prefix) const = 0;
};

// Whether this server answers now: the fencing of musterd's replicas
// (rendezvous/src/service/leader_gate.h). Thread-safe; never blocks.
class StoreGate {
 public:
  virtual ~StoreGate() = default;
  // OK while this server serves; otherwise UNAVAILABLE naming the leader.
  virtual absl::Status Check() const = 0;
  // The leader's HOST:PORT when this server is a standby that knows it;
  // empty otherwise.
  virtual std::string leader() const = 0;
  // Serving, and its leadership confirmed recently enough.
  virtual bool serving() const = 0;
  // Leads, confirmed or not: while leads() && !serving(), answers are held,
  // not refused; a standby (!leads()) refuses.
  virtual bool leads() const = 0;
  // The leadership's fencing token, sent as kEpochMetadataKey.
  virtual int64_t epoch() const = 0;
};

// Where the service's counts go. Thread-safe.
class StoreMetrics {
 public:
  virtual ~StoreMetrics() = default;
  // One op that came over Store.Stream ("Set", "Get", ...).
  virtual void CountStoreOp(absl::string_view op) = 0;
  // One finished call: its full method name ("/muster.v1.Store/Stream"),
  // status code and duration.
  virtual void Observe(const std::string& method, absl::StatusCode code,
                       absl::Duration elapsed) = 0;
};

}  // namespace muster::store

#endif  // MUSTER_STORE_SERVICE_HOOKS_H_
