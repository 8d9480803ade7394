#include "muster/store/grpc_store.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "muster/common/net.h"
#include "muster/store/grpc_security.h"
#include "muster/store/grpc_status.h"
#include "muster/store/service_hooks.h"
#include "muster/v1/store.grpc.pb.h"
#include "store/src/grpc_store_stream.h"

namespace muster::store {
namespace {

constexpr int kDefaultStorePort = 29400;

}  // namespace

namespace internal {
namespace {

// `wait` is how long the call may wait on the server (zero for calls that do
// not wait).
void Deadline(grpc::ClientContext* context, absl::Duration wait) {
  if (wait == absl::InfiniteDuration()) return;
  context->set_deadline(absl::ToChronoTime(
      absl::Now() + std::max(wait, absl::ZeroDuration()) +
      (wait > absl::ZeroDuration() ? kWaitMargin : kCallTimeout)));
}

}  // namespace

// timeout_ms for a request: 0 = do not wait; at least 1 ms for any positive
// timeout; int64 max for an infinite one.
int64_t TimeoutMs(absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) return 0;
  if (timeout == absl::InfiniteDuration())
    return std::numeric_limits<int64_t>::max();
  return std::max<int64_t>(
      1, absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1))));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> GrpcStore::ChannelLocked(int i) {
  if (channels_.size() < endpoints_.size()) {
    channels_.resize(endpoints_.size());
    stubs_.resize(endpoints_.size());
  }
  if (channels_[i] == nullptr) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        NewSecureMusterChannel(endpoints_[i], security_);
    if (!channel.ok()) return channel.status();
    channels_[i] = *std::move(channel);
    stubs_[i] = v1::Store::NewStub(channels_[i]);
  }
  return channels_[i];
}

int GrpcStore::IndexOfLocked(const std::string& endpoint) {
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    if (endpoints_[i].ToString() == endpoint) return static_cast<int>(i);
  }
  absl::StatusOr<HostPort> parsed = ParseHostPort(endpoint, kDefaultStorePort);
  if (!parsed.ok() || parsed->host.empty()) return -1;
  endpoints_.push_back(*parsed);
  return static_cast<int>(endpoints_.size()) - 1;
}

absl::Status GrpcStore::Connect(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<HostPort> endpoints;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < endpoints_.size(); ++i) {
      absl::StatusOr<std::shared_ptr<grpc::Channel>> c =
          ChannelLocked(static_cast<int>(i));
      if (!c.ok()) return c.status();
      channels.push_back(*c);
    }
    endpoints = endpoints_;
  }
  if (endpoints.size() == 1) {
    // One musterd: the patient wait that names the cause (refused, no answer,
    // TLS mismatch) when it cannot be reached.
    absl::Status connected =
        WaitForChannel(*channels[0], endpoints[0], "store", timeout,
                       ChannelWait::kPatient, security_.tls());
    if (!connected.ok()) return connected;
  } else {
    // Replicas: any of them will do; the stream finds the leader.
    bool any = false;
    while (!any && absl::Now() < deadline) {
      for (size_t i = 0; i < channels.size() && !any; ++i) {
        any = channels[i]->WaitForConnected(absl::ToChronoTime(
            std::min(deadline, absl::Now() + absl::Milliseconds(100))));
        if (any) {
          absl::MutexLock lock(&mu_);
          current_ = static_cast<int>(i);
        }
      }
    }
    if (!any) {
      std::vector<std::string> causes;
      for (size_t i = 0; i < channels.size(); ++i) {
        absl::Status s = WaitForChannel(
            *channels[i], endpoints[i], "store", absl::Milliseconds(1),
            ChannelWait::kFailFast, security_.tls());
        causes.push_back(std::string(s.message()));
      }
      return absl::UnavailableError(absl::StrCat(
          "cannot reach any store replica within ",
          absl::FormatDuration(timeout), ": ", absl::StrJoin(causes, "; ")));
    }
  }
  if (unary_) {
    absl::MutexLock lock(&mu_);
    use_unary_ = true;
    return absl::OkStatus();
  }
  supervisor_ = std::thread([this] { Supervise(); });
  absl::MutexLock lock(&mu_);
  need_stream_ = true;
  failing_since_ = absl::Now();
  cv_.SignalAll();
  // Not needed any more: the tries failed for good (one musterd refused, or
  // every replica for failover_timeout).
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return conn_open_ || use_unary_ || !need_stream_;
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&settled), deadline) ||
      (!conn_open_ && !use_unary_)) {
    return absl::UnavailableError(absl::StrCat(
        "no store replica of ", EndpointList(),
        " accepted a Store stream within ", absl::FormatDuration(timeout),
        last_error_.empty() ? "" : absl::StrCat(": ", last_error_)));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::StoreResponse> GrpcStore::CallUnary(
    const v1::StoreRequest& r, absl::string_view call, absl::string_view keys,
    absl::Duration wait) {
  // A standby's refusal names the leader: follow it (a few times at most).
  for (int attempt = 0;; ++attempt) {
    std::shared_ptr<grpc::Channel> channel;
    std::string endpoint;
    {
      absl::MutexLock lock(&mu_);
      absl::StatusOr<std::shared_ptr<grpc::Channel>> c =
          ChannelLocked(current_);
      if (!c.ok()) return c.status();
      channel = *c;
      endpoint = endpoints_[current_].ToString();
    }
    std::unique_ptr<v1::Store::Stub> stub = v1::Store::NewStub(channel);
    grpc::ClientContext context;
    Deadline(&context, wait);
    v1::StoreResponse out;
    out.set_id(r.id());
    grpc::Status status;
    switch (r.op_case()) {
      case v1::StoreRequest::kSet: {
        v1::SetRequest q = r.set();
        q.set_prefix(r.prefix());
        status = stub->Set(&context, q, out.mutable_set());
        break;
      }
      case v1::StoreRequest::kGet: {
        v1::GetRequest q = r.get();
        q.set_prefix(r.prefix());
        status = stub->Get(&context, q, out.mutable_get());
        break;
      }
      case v1::StoreRequest::kAdd: {
        v1::AddRequest q = r.add();
        q.set_prefix(r.prefix());
        status = stub->Add(&context, q, out.mutable_add());
        break;
      }
      case v1::StoreRequest::kCompareSet: {
        v1::CompareSetRequest q = r.compare_set();
        q.set_prefix(r.prefix());
        status = stub->CompareSet(&context, q, out.mutable_compare_set());
        break;
      }
      case v1::StoreRequest::kWait: {
        v1::WaitRequest q = r.wait();
        q.set_prefix(r.prefix());
        status = stub->Wait(&context, q, out.mutable_wait());
        break;
      }
      case v1::StoreRequest::kMultiGet: {
        v1::MultiGetRequest q = r.multi_get();
        q.set_prefix(r.prefix());
        status = stub->MultiGet(&context, q, out.mutable_multi_get());
        break;
      }
      case v1::StoreRequest::kMultiSet: {
        v1::MultiSetRequest q = r.multi_set();
        q.set_prefix(r.prefix());
        status = stub->MultiSet(&context, q, out.mutable_multi_set());
        break;
      }
      case v1::StoreRequest::kDelete: {
        v1::DeleteRequest q = r.delete_();
        q.set_prefix(r.prefix());
        status = stub->Delete(&context, q, out.mutable_delete_());
        break;
      }
      case v1::StoreRequest::kNumKeys: {
        v1::NumKeysRequest q = r.num_keys();
        q.set_prefix(r.prefix());
        status = stub->NumKeys(&context, q, out.mutable_num_keys());
        break;
      }
      case v1::StoreRequest::OP_NOT_SET:
        return absl::InternalError("a Store op without an op");
    }
    if (status.ok()) return out;
    const std::string leader = LeaderFromTrailers(context);
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
        !leader.empty() && attempt < 3) {
      absl::MutexLock lock(&mu_);
      const int i = IndexOfLocked(leader);
      if (i >= 0) {
        current_ = i;
        continue;
      }
    }
    return Check(status, call, keys, wait, endpoint);
  }
}

absl::Status GrpcStore::Check(const grpc::Status& status,
                              absl::string_view call, absl::string_view keys,
                              absl::Duration wait,
                              const std::string& endpoint) const {
  if (status.ok()) return absl::OkStatus();
  absl::Status s = FromGrpcStatus(status);
  const std::string what =
      keys.empty() ? std::string(call) : absl::StrCat(call, " '", keys, "'");
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      return absl::UnavailableError(
          absl::StrCat(what, " on the store at ", endpoint,
                       " failed: ", status.error_message()));
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      if (status.error_message() ==
          "Deadline Exceeded") {  // gRPC's own, not the server's
        return absl::DeadlineExceededError(absl::StrCat(
            "the store at ", endpoint, " did not answer ", what, " within ",
            absl::FormatDuration(
                std::max(wait, absl::ZeroDuration()) +
                (wait > absl::ZeroDuration() ? kWaitMargin : kCallTimeout))));
      }
      return s;
    default:
      return s;
  }
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<Store>> NewGrpcStore(
    const GrpcStoreOptions& options) {
  if (options.endpoint.empty()) {
    return absl::InvalidArgumentError(
        "the store endpoint is empty: set MUSTER_STORE_ENDPOINT (HOST:PORT of "
        "musterd, or H1:P1,H2:P2 of its replicas)");
  }
  if (options.prefix.empty()) {
    return absl::InvalidArgumentError(
        "the store prefix is empty: set MUSTER_STORE_PREFIX (the round's "
        "store_prefix)");
  }
  if (options.failover_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "failover_timeout is ", absl::FormatDuration(options.failover_timeout),
        ": it must be positive"));
  }
  std::vector<HostPort> endpoints;
  for (absl::string_view part : absl::StrSplit(options.endpoint, ',')) {
    part = absl::StripAsciiWhitespace(part);
    absl::StatusOr<HostPort> target = ParseHostPort(part, kDefaultStorePort);
    if (part.empty() || !target.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad store endpoint '", options.endpoint,
          "': expected HOST:PORT or a comma-separated list H1:P1,H2:P2 of "
          "musterd replicas",
          target.ok() ? std::string(" (an empty entry)")
                      : absl::StrCat(" (", target.status().message(), ")")));
    }
    if (target->host.empty()) target->host = "127.0.0.1";
    endpoints.push_back(*std::move(target));
  }
  auto store = std::make_unique<internal::GrpcStore>(
      std::move(endpoints), options.prefix, options.security,
      options.failover_timeout, options.unary, options.repeat_sets_in_flight);
  absl::Status connected = store->Connect(options.connect_timeout);
  if (!connected.ok()) return connected;
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace muster::store
