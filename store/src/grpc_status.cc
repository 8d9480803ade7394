#include "muster/store/grpc_status.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "muster/common/probe.h"
#include "muster/store/grpc_security.h"
#include "muster/store/service_hooks.h"

namespace muster::store {

// absl::StatusCode and grpc::StatusCode are both the canonical codes (0..16),
// so the numbers are the same; anything out of range (never sent by a gRPC
// peer) becomes UNKNOWN.
grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  int code = static_cast<int>(status.code());
  if (code < 0 || code > static_cast<int>(grpc::StatusCode::UNAUTHENTICATED)) {
    code = static_cast<int>(grpc::StatusCode::UNKNOWN);
  }
  return grpc::Status(static_cast<grpc::StatusCode>(code),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  int code = static_cast<int>(status.error_code());
  if (code < 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    code = static_cast<int>(absl::StatusCode::kUnknown);
  }
  return absl::Status(static_cast<absl::StatusCode>(code),
                      status.error_message());
}

std::string LeaderFromTrailers(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find(kLeaderMetadataKey);
  if (it == trailers.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

std::shared_ptr<grpc::Channel> NewMusterChannel(const HostPort& target) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // The server permits these pings (server.cc).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10'000);
  return grpc::CreateCustomChannel(target.ToString(),
                                   grpc::InsecureChannelCredentials(), args);
}

namespace {

// Why a TCP probe of the target failed, and what to do, for an UNAVAILABLE
// message; empty when the port accepts connections.
std::string DescribeProbe(const ProbeResult& probe, const HostPort& target) {
  switch (probe.outcome) {
    case ProbeOutcome::kOpen:
      return "";
    case ProbeOutcome::kRefused:
      return "nothing is listening there (connection refused) — start musterd "
             "there, or check --rdzv-endpoint";
    case ProbeOutcome::kFiltered:
      return "no answer (the host is down, or a firewall drops the packets) — "
             "check the host and its firewall; `muster doctor` names the cause";
    case ProbeOutcome::kDnsFailure:
      return absl::StrCat("the host name '", target.host,
                          "' does not resolve (", probe.detail,
                          ") — check --rdzv-endpoint");
    case ProbeOutcome::kRejected:
    case ProbeOutcome::kUnreachable:
      return absl::StrCat(probe.Explain(), " — ", probe.Fix());
    case ProbeOutcome::kError:
      break;
  }
  return absl::StrCat(probe.detail, " — check --rdzv-endpoint and the network");
}

absl::Status Unreachable(const HostPort& target, absl::string_view what,
                         absl::string_view when, absl::string_view cause) {
  return absl::UnavailableError(absl::StrCat(
      "cannot reach the ", what, " at ", target.ToString(), when, ": ", cause));
}

}  // namespace

absl::Status WaitForChannel(grpc::Channel& channel, const HostPort& target,
                            absl::string_view what, absl::Duration timeout,
                            ChannelWait wait, bool client_tls) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  if (wait == ChannelWait::kFailFast) {
    // A one-shot command: a port that answers with a reset, a name that does
    // not resolve or a REJECT will not change while it waits.
    const ProbeResult probe =
        ProbeTcp(target.host, target.port, std::min(timeout, absl::Seconds(2)));
    if (probe.outcome != ProbeOutcome::kOpen &&
        probe.outcome != ProbeOutcome::kFiltered) {
      return Unreachable(target, what, "", DescribeProbe(probe, target));
    }
  }
  // Keep a little of the budget for the probe that names the cause.
  const absl::Duration probe_budget = std::min(timeout / 5, absl::Seconds(1));
  // Waits for READY; each time the channel fails (at most once a second) a
  // TLS probe checks for a plaintext/TLS mismatch, which no retry mends.
  absl::Time next_tls_check = absl::InfinitePast();
  grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE &&
        absl::Now() >= next_tls_check) {
      next_tls_check = absl::Now() + absl::Seconds(1);
      std::string mismatch = DescribeTlsMismatch(
          target, client_tls,
          std::max(absl::Milliseconds(100),
                   std::min(absl::Seconds(2), deadline - absl::Now())));
      if (!mismatch.empty()) {
        return absl::UnavailableError(absl::StrCat("cannot talk to the ", what,
                                                   " at ", target.ToString(),
                                                   ": ", mismatch));
      }
    }
    const absl::Time wake =
        std::min(deadline - probe_budget, absl::Now() + absl::Seconds(1));
    if (absl::Now() >= deadline - probe_budget) break;
    channel.WaitForStateChange(state, absl::ToChronoTime(wake));
    state = channel.GetState(/*try_to_connect=*/true);
  }
  if (state == GRPC_CHANNEL_READY) return absl::OkStatus();
  const ProbeResult probe =
      ProbeTcp(target.host, target.port,
               std::max(absl::Milliseconds(1), deadline - absl::Now()));
  std::string cause = DescribeProbe(probe, target);
  if (cause.empty()) {
    cause =
        "the port accepts TCP connections but no gRPC server answered there "
        "(is it musterd?) — check --rdzv-endpoint";
  }
  return Unreachable(target, what,
                     absl::StrCat(" within ", absl::FormatDuration(timeout)),
                     cause);
}

}  // namespace muster::store
