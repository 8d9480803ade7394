#include "rendezvous/src/service/metrics.h"

#include <grpcpp/support/interceptor.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "muster/common/http_server.h"

namespace muster::rendezvous {
namespace {

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::OK:
      return "OK";
    case grpc::CANCELLED:
      return "CANCELLED";
    case grpc::UNKNOWN:
      return "UNKNOWN";
    case grpc::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::ABORTED:
      return "ABORTED";
    case grpc::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::INTERNAL:
      return "INTERNAL";
    case grpc::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

// One per RPC: created when the call starts, records it when its status is
// sent.
class TimingInterceptor : public grpc::experimental::Interceptor {
 public:
  TimingInterceptor(RpcMetrics* metrics, std::string method)
      : metrics_(metrics), method_(std::move(method)), start_(absl::Now()) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      metrics_->Observe(method_,
                        CodeName(methods->GetSendStatus().error_code()),
                        absl::Now() - start_);
    }
    methods->Proceed();
  }

 private:
  RpcMetrics* const metrics_;
  const std::string method_;
  const absl::Time start_;
};

class TimingFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit TimingFactory(RpcMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    if (info->type() == grpc::experimental::ServerRpcInfo::Type::BIDI_STREAMING)
      return nullptr;  // Session: observed by SessionService
    return new TimingInterceptor(
        metrics_, info->method() != nullptr ? info->method() : "?");
  }

 private:
  RpcMetrics* const metrics_;
};

void Line(std::string* out, const std::string& name, const std::string& labels,
          double value) {
  absl::StrAppend(out, name,
                  labels.empty() ? "" : absl::StrCat("{", labels, "}"), " ",
                  value, "\n");
}

void Help(std::string* out, const std::string& name, const std::string& type,
          const std::string& help) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type,
                  "\n");
}

}  // namespace

void RpcMetrics::Observe(const std::string& method, const std::string& code,
                         absl::Duration elapsed) {
  const double seconds = absl::ToDoubleSeconds(elapsed);
  absl::MutexLock lock(&mu_);
  ++calls_[{method, code}];
  Histogram& h = latency_[method];
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    if (seconds <= kBuckets[i]) ++h.buckets[i];
  }
  ++h.count;
  h.sum += seconds;
}

void RpcMetrics::Observe(const std::string& method, grpc::StatusCode code,
                         absl::Duration elapsed) {
  Observe(method, CodeName(code), elapsed);
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
RpcMetrics::NewInterceptorFactory() {
  return std::make_unique<TimingFactory>(this);
}

std::map<std::string, uint64_t> RpcMetrics::StoreOpsLocked() const {
  std::map<std::string, uint64_t> ops;
  for (const auto& [key, n] : calls_) {
    constexpr absl::string_view kStore = "/muster.v1.Store/";
    if (absl::StartsWith(key.first, kStore))
      ops[key.first.substr(kStore.size())] += n;
  }
  for (const auto& [op, n] : stream_ops_) ops[op] += n;
  return ops;
}

uint64_t RpcMetrics::StoreOps() const {
  absl::MutexLock lock(&mu_);
  uint64_t total = 0;
  for (const auto& [op, n] : StoreOpsLocked()) total += n;
  return total;
}

void RpcMetrics::CountStoreOp(absl::string_view op) {
  absl::MutexLock lock(&mu_);
  auto it = stream_ops_.find(op);
  if (it == stream_ops_.end())
    it = stream_ops_.emplace(std::string(op), 0).first;
  ++it->second;
}

std::string RpcMetrics::Render(const Coordinator& coordinator,
                               const store::KvStore& store) const {
  std::string out;
  Help(&out, "muster_build_info", "gauge", "musterd's version.");
  Line(&out, "muster_build_info",
       absl::StrCat("version=\"", MUSTER_VERSION, "\""), 1);

  const v1::GetStatusResponse status = coordinator.Status("");
  std::map<std::string, int> by_state = {
      {"OPEN", 0}, {"RUNNING", 0}, {"SUCCEEDED", 0}, {"FAILED", 0}};
  int64_t restarts = 0;
  for (const v1::JobStatus& job : status.jobs()) {
    ++by_state[job.state()];
    restarts += job.restart_count();
  }
  Help(&out, "muster_jobs", "gauge", "Jobs known to the server, by state.");
  for (const auto& [state, n] : by_state) {
    Line(&out, "muster_jobs", absl::StrCat("state=\"", state, "\""), n);
  }
  Help(&out, "muster_agents_connected", "gauge",
       "Agents with an open session.");
  Line(&out, "muster_agents_connected", "",
       static_cast<double>(coordinator.ConnectedAgents()));
  Help(&out, "muster_restarts", "gauge",
       "Worker-failure restarts taken by the known jobs.");
  Line(&out, "muster_restarts", "", static_cast<double>(restarts));
  // One gauge per job, labelled job="ID".
  const auto per_job = [&](const std::string& name, const std::string& help,
                           double (*value)(const v1::JobStatus&)) {
    Help(&out, name, "gauge", help);
    for (const v1::JobStatus& job : status.jobs()) {
      Line(&out, name,
           absl::StrCat("job=\"", PrometheusLabel(job.job_id()), "\""),
           value(job));
    }
  };
  per_job(
      "muster_job_round", "The current round of each job.",
      [](const v1::JobStatus& j) { return static_cast<double>(j.round()); });
  per_job("muster_job_members", "Nodes in each job's current round.",
          [](const v1::JobStatus& j) { return double{1} * j.members_size(); });
  per_job("muster_job_restarts", "Worker-failure restarts each job has taken.",
          [](const v1::JobStatus& j) { return double{1} * j.restart_count(); });
  per_job(
      "muster_job_stragglers",
      "Ranks of each running job whose speed score is under the job's "
      "--straggler-threshold.",
      [](const v1::JobStatus& j) { return double{1} * j.stragglers_size(); });
  per_job("muster_job_excluded_nodes",
          "Nodes excluded from each job whose --exclude-cooldown has not "
          "passed.",
          [](const v1::JobStatus& j) { return double{1} * j.excluded_size(); });
  Help(&out, "muster_store_namespaces", "gauge",
       "Store namespaces (live rounds) holding keys.");
  Line(&out, "muster_store_namespaces", "",
       static_cast<double>(store.NamespaceCount()));
  Help(&out, "muster_store_pending_waits", "gauge",
       "Store calls waiting for keys.");
  Line(&out, "muster_store_pending_waits", "",
       static_cast<double>(store.PendingWaiters()));

  absl::MutexLock lock(&mu_);
  Help(&out, "muster_store_ops_total", "counter",
       "Store service calls, by operation.");
  for (const auto& [op, n] : StoreOpsLocked()) {
    Line(&out, "muster_store_ops_total", absl::StrCat("op=\"", op, "\""),
         static_cast<double>(n));
  }
  Help(&out, "muster_rpc_total", "counter",
       "RPCs finished, by method and status code.");
  for (const auto& [key, n] : calls_) {
    Line(&out, "muster_rpc_total",
         absl::StrCat("method=\"", key.first, "\",code=\"", key.second, "\""),
         static_cast<double>(n));
  }
  Help(&out, "muster_rpc_duration_seconds", "histogram",
       "Time from an RPC's start to its status, by method (a Session lasts a "
       "whole job).");
  for (const auto& [method, h] : latency_) {
    for (size_t i = 0; i < kBuckets.size(); ++i) {
      Line(&out, "muster_rpc_duration_seconds_bucket",
           absl::StrCat("method=\"", method, "\",le=\"", kBuckets[i], "\""),
           static_cast<double>(h.buckets[i]));
    }
    Line(&out, "muster_rpc_duration_seconds_bucket",
         absl::StrCat("method=\"", method, "\",le=\"+Inf\""),
         static_cast<double>(h.count));
    Line(&out, "muster_rpc_duration_seconds_sum",
         absl::StrCat("method=\"", method, "\""), h.sum);
    Line(&out, "muster_rpc_duration_seconds_count",
         absl::StrCat("method=\"", method, "\""), static_cast<double>(h.count));
  }
  return out;
}

}  // namespace muster::rendezvous
