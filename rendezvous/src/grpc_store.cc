#include "muster/rendezvous/grpc_store.h"

#include <grpcpp/grpcpp.h>

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "muster/common/net.h"
#include "muster/v1/store.grpc.pb.h"
#include "rendezvous/src/grpc_security.h"
#include "rendezvous/src/grpc_status.h"

namespace muster::rendezvous {
namespace {

constexpr int kDefaultStorePort = 29400;
// Deadline of calls that do not wait: generous, only a hung server or a cut
// network reaches it.
constexpr absl::Duration kCallTimeout = absl::Seconds(30);
// Calls that wait get timeout + this as their gRPC deadline, so the server's
// DEADLINE_EXCEEDED (which names the keys) comes first.
constexpr absl::Duration kWaitMargin = absl::Seconds(5);

// timeout_ms for a request: 0 = do not wait; at least 1 ms for any positive
// timeout; int64 max for an infinite one.
int64_t TimeoutMs(absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) return 0;
  if (timeout == absl::InfiniteDuration())
    return std::numeric_limits<int64_t>::max();
  return std::max<int64_t>(
      1, absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1))));
}

// Thread-safe: a gRPC stub may be used from any number of threads at once.
class GrpcStore final : public Store {
 public:
  GrpcStore(HostPort target, std::string prefix,
            std::shared_ptr<grpc::Channel> channel)
      : target_(std::move(target)),
        prefix_(std::move(prefix)),
        channel_(std::move(channel)),
        stub_(v1::Store::NewStub(channel_)) {}

  absl::Status Set(absl::string_view key, absl::string_view value) override {
    v1::SetRequest request;
    request.set_prefix(prefix_);
    request.set_key(std::string(key));
    request.set_value(std::string(value));
    v1::SetResponse response;
    grpc::ClientContext context;
    Deadline(&context, absl::ZeroDuration());
    return Check(stub_->Set(&context, request, &response), "Set", key,
                 absl::ZeroDuration());
  }

  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override {
    v1::GetRequest request;
    request.set_prefix(prefix_);
    request.set_key(std::string(key));
    request.set_timeout_ms(TimeoutMs(timeout));
    v1::GetResponse response;
    grpc::ClientContext context;
    Deadline(&context, timeout);
    absl::Status status =
        Check(stub_->Get(&context, request, &response), "Get", key, timeout);
    if (!status.ok()) return status;
    return std::move(*response.mutable_value());
  }

  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override {
    v1::AddRequest request;
    request.set_prefix(prefix_);
    request.set_key(std::string(key));
    request.set_delta(delta);
    v1::AddResponse response;
    grpc::ClientContext context;
    Deadline(&context, absl::ZeroDuration());
    absl::Status status = Check(stub_->Add(&context, request, &response), "Add",
                                key, absl::ZeroDuration());
    if (!status.ok()) return status;
    return response.value();
  }

  absl::StatusOr<std::string> CompareSet(absl::string_view key,
                                         absl::string_view expected,
                                         absl::string_view desired) override {
    v1::CompareSetRequest request;
    request.set_prefix(prefix_);
    request.set_key(std::string(key));
    request.set_expected(std::string(expected));
    request.set_desired(std::string(desired));
    v1::CompareSetResponse response;
    grpc::ClientContext context;
    Deadline(&context, absl::ZeroDuration());
    absl::Status status = Check(stub_->CompareSet(&context, request, &response),
                                "CompareSet", key, absl::ZeroDuration());
    if (!status.ok()) return status;
    return std::move(*response.mutable_value());
  }

  absl::Status Wait(absl::Span<const std::string> keys,
                    absl::Duration timeout) override {
    v1::WaitRequest request;
    request.set_prefix(prefix_);
    for (const std::string& key : keys) request.add_keys(key);
    request.set_timeout_ms(TimeoutMs(timeout));
    v1::WaitResponse response;
    grpc::ClientContext context;
    Deadline(&context, timeout);
    return Check(stub_->Wait(&context, request, &response), "Wait",
                 absl::StrJoin(keys, ", "), timeout);
  }

  absl::StatusOr<std::vector<std::string>> MultiGet(
      absl::Span<const std::string> keys, absl::Duration timeout) override {
    v1::MultiGetRequest request;
    request.set_prefix(prefix_);
    for (const std::string& key : keys) request.add_keys(key);
    request.set_timeout_ms(TimeoutMs(timeout));
    v1::MultiGetResponse response;
    grpc::ClientContext context;
    Deadline(&context, timeout);
    absl::Status status = Check(stub_->MultiGet(&context, request, &response),
                                "MultiGet", absl::StrJoin(keys, ", "), timeout);
    if (!status.ok()) return status;
    if (response.values_size() != static_cast<int>(keys.size())) {
      return absl::InternalError(absl::StrCat(
          "MultiGet of ", keys.size(), " keys from ", target_.ToString(),
          " returned ", response.values_size(), " values"));
    }
    return std::vector<std::string>(
        std::make_move_iterator(response.mutable_values()->begin()),
        std::make_move_iterator(response.mutable_values()->end()));
  }

  absl::Status MultiSet(absl::Span<const std::string> keys,
                        absl::Span<const std::string> values) override {
    if (keys.size() != values.size()) {
      return absl::InvalidArgumentError(absl::StrCat("MultiSet has ",
                                                     keys.size(), " keys but ",
                                                     values.size(), " values"));
    }
    v1::MultiSetRequest request;
    request.set_prefix(prefix_);
    for (const std::string& key : keys) request.add_keys(key);
    for (const std::string& value : values) request.add_values(value);
    v1::MultiSetResponse response;
    grpc::ClientContext context;
    Deadline(&context, absl::ZeroDuration());
    return Check(stub_->MultiSet(&context, request, &response), "MultiSet",
                 absl::StrJoin(keys, ", "), absl::ZeroDuration());
  }

  absl::StatusOr<bool> Delete(absl::string_view key) override {
    v1::DeleteRequest request;
    request.set_prefix(prefix_);
    request.set_key(std::string(key));
    v1::DeleteResponse response;
    grpc::ClientContext context;
    Deadline(&context, absl::ZeroDuration());
    absl::Status status = Check(stub_->Delete(&context, request, &response),
                                "Delete", key, absl::ZeroDuration());
    if (!status.ok()) return status;
    return response.deleted();
  }

  absl::StatusOr<int64_t> NumKeys() override {
    v1::NumKeysRequest request;
    request.set_prefix(prefix_);
    v1::NumKeysResponse response;
    grpc::ClientContext context;
    Deadline(&context, absl::ZeroDuration());
    absl::Status status = Check(stub_->NumKeys(&context, request, &response),
                                "NumKeys", "", absl::ZeroDuration());
    if (!status.ok()) return status;
    return response.count();
  }

 private:
  // `wait` is how long the call may wait on the server (zero for calls that do
  // not wait).
  static void Deadline(grpc::ClientContext* context, absl::Duration wait) {
    if (wait == absl::InfiniteDuration()) return;
    context->set_deadline(absl::ToChronoTime(
        absl::Now() + std::max(wait, absl::ZeroDuration()) +
        (wait > absl::ZeroDuration() ? kWaitMargin : kCallTimeout)));
  }

  // The call's status as an absl::Status. Errors of the server (which name keys
  // and namespaces) pass as they are; those of the transport get the call and
  // the endpoint.
  absl::Status Check(const grpc::Status& status, absl::string_view call,
                     absl::string_view keys, absl::Duration wait) const {
    if (status.ok()) return absl::OkStatus();
    absl::Status s = FromGrpcStatus(status);
    const std::string what =
        keys.empty() ? std::string(call) : absl::StrCat(call, " '", keys, "'");
    switch (status.error_code()) {
      case grpc::StatusCode::UNAVAILABLE:
        return absl::UnavailableError(
            absl::StrCat(what, " on the store at ", target_.ToString(),
                         " failed: ", status.error_message()));
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        if (status.error_message() ==
            "Deadline Exceeded") {  // gRPC's own, not the server's
          return absl::DeadlineExceededError(absl::StrCat(
              "the store at ", target_.ToString(), " did not answer ", what,
              " within ",
              absl::FormatDuration(
                  std::max(wait, absl::ZeroDuration()) +
                  (wait > absl::ZeroDuration() ? kWaitMargin : kCallTimeout))));
        }
        return s;
      default:
        return s;
    }
  }

  const HostPort target_;
  const std::string prefix_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::Store::Stub> stub_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> NewGrpcStore(
    const GrpcStoreOptions& options) {
  if (options.endpoint.empty()) {
    return absl::InvalidArgumentError(
        "the store endpoint is empty: set MUSTER_STORE_ENDPOINT (HOST:PORT of "
        "musterd)");
  }
  if (options.prefix.empty()) {
    return absl::InvalidArgumentError(
        "the store prefix is empty: set MUSTER_STORE_PREFIX (the round's "
        "store_prefix)");
  }
  absl::StatusOr<HostPort> target =
      ParseHostPort(options.endpoint, kDefaultStorePort);
  if (!target.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad store endpoint: ", target.status().message()));
  }
  if (target->host.empty()) target->host = "127.0.0.1";
  absl::StatusOr<std::shared_ptr<grpc::Channel>> secure =
      NewSecureMusterChannel(*target, options.security);
  if (!secure.ok()) return secure.status();
  std::shared_ptr<grpc::Channel> channel = *std::move(secure);
  absl::Status connected =
      WaitForChannel(*channel, *target, "store", options.connect_timeout,
                     ChannelWait::kPatient, options.security.tls());
  if (!connected.ok()) return connected;
  return std::unique_ptr<Store>(
      new GrpcStore(*target, options.prefix, std::move(channel)));
}

}  // namespace muster::rendezvous
