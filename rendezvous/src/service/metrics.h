// musterd's metrics: every RPC counted and timed by method and code (a gRPC
// server interceptor, so no handler carries timing code; Session streams
// report their own end instead, see NewInterceptorFactory), and the Prometheus
// text of /metrics, which adds the Coordinator's and the KvStore's state at the
// moment of the scrape.
#ifndef MUSTER_RENDEZVOUS_SRC_METRICS_H_
#define MUSTER_RENDEZVOUS_SRC_METRICS_H_

#include <grpcpp/support/server_interceptor.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "muster/rendezvous/coordinator.h"
#include "muster/store/kv_store.h"
#include "muster/store/service_hooks.h"

namespace muster::rendezvous {

// The Store service's metrics too (store::StoreMetrics). Thread-safe.
class RpcMetrics final : public store::StoreMetrics {
 public:
  // Upper bounds of the latency histogram, in seconds (Prometheus "le").
  static constexpr std::array<double, 12> kBuckets = {
      0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 300};

  // Records one finished RPC: its full method name ("/muster.v1.Store/Get"),
  // the status code name and how long it took.
  void Observe(const std::string& method, const std::string& code,
               absl::Duration elapsed);
  void Observe(const std::string& method, grpc::StatusCode code,
               absl::Duration elapsed);
  void Observe(const std::string& method, absl::StatusCode code,
               absl::Duration elapsed) override {
    Observe(method, static_cast<grpc::StatusCode>(code), elapsed);
  }

  // One Store op that came over Store.Stream ("Set", "Get", ...): counted
  // in muster_store_ops_total with the unary calls of the same op (the
  // interceptor sees the stream, not its ops).
  void CountStoreOp(absl::string_view op) override;

  // An interceptor factory that feeds this object; register it with the
  // ServerBuilder. It leaves out bidirectional streams: an interceptor runs on
  // every message of a stream, and 10,000 agents' heartbeats are 40,000
  // messages a second. The Session service observes its streams' ends itself.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  NewInterceptorFactory();

  // Store ops since the start, unary and streamed (muster_store_ops_total
  // summed over ops).
  uint64_t StoreOps() const;

  // The Prometheus text exposition of the RPC metrics and of the server's
  // state.
  std::string Render(const Coordinator& coordinator,
                     const store::KvStore& store) const;

 private:
  struct Histogram {
    std::array<uint64_t, kBuckets.size()> buckets{};
    uint64_t count = 0;
    double sum = 0;
  };
  std::map<std::string, uint64_t> StoreOpsLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, std::string>, uint64_t> calls_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, Histogram> latency_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t, std::less<>> stream_ops_ ABSL_GUARDED_BY(mu_);
};

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_METRICS_H_
