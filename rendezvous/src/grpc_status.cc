#include "rendezvous/src/grpc_status.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace muster::rendezvous {

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

enum class Reach { kAccepts, kRefused, kNoAnswer, kUnresolvable, kError };

struct Probe {
  Reach reach = Reach::kError;
  std::string detail;
};

// One TCP connect attempt to each address of host:port, all within `timeout`;
// the best outcome.
Probe ProbeTcp(const std::string& host, int port, absl::Duration timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addrs = nullptr;
  const std::string port_text = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), port_text.c_str(), &hints, &addrs);
  if (rc != 0) return {Reach::kUnresolvable, gai_strerror(rc)};
  const absl::Time deadline = absl::Now() + timeout;
  Probe best{Reach::kError, "no address to try"};
  auto rank = [](Reach r) {
    switch (r) {
      case Reach::kAccepts:
        return 0;
      case Reach::kRefused:
        return 1;
      case Reach::kNoAnswer:
        return 2;
      default:
        return 3;
    }
  };
  for (addrinfo* a = addrs; a != nullptr && best.reach != Reach::kAccepts;
       a = a->ai_next) {
    Probe probe;
    int fd =
        socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    int err = 0;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        int ms = static_cast<int>(std::max<int64_t>(
            0, absl::ToInt64Milliseconds(deadline - absl::Now())));
        if (poll(&p, 1, ms) == 1) {
          socklen_t len = sizeof(err);
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        } else {
          err = ETIMEDOUT;
        }
      }
    }
    close(fd);
    if (err == 0) {
      probe = {Reach::kAccepts, ""};
    } else if (err == ECONNREFUSED) {
      probe = {Reach::kRefused, ""};
    } else if (err == ETIMEDOUT) {
      probe = {Reach::kNoAnswer, ""};
    } else {
      probe = {Reach::kError, std::strerror(err)};
    }
    if (rank(probe.reach) < rank(best.reach)) best = probe;
  }
  freeaddrinfo(addrs);
  return best;
}

}  // namespace

absl::Status WaitForChannel(grpc::Channel& channel, const HostPort& target,
                            absl::string_view what, absl::Duration timeout) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  // Keep a little of the budget for the probe that names the cause.
  const absl::Duration probe_budget = std::min(timeout / 5, absl::Seconds(1));
  if (channel.WaitForConnected(absl::ToChronoTime(deadline - probe_budget))) {
    return absl::OkStatus();
  }
  Probe probe =
      ProbeTcp(target.host, target.port,
               std::max(absl::ZeroDuration(), deadline - absl::Now()));
  std::string cause;
  switch (probe.reach) {
    case Reach::kRefused:
      cause =
          "nothing is listening there (connection refused) — start musterd "
          "there, or check "
          "--rdzv-endpoint";
      break;
    case Reach::kNoAnswer:
      cause =
          "no answer (the host is down, or a firewall drops the packets) — "
          "check the host and "
          "its firewall; `muster doctor` names the cause";
      break;
    case Reach::kUnresolvable:
      cause =
          absl::StrCat("the host name '", target.host, "' does not resolve (",
                       probe.detail, ") — check --rdzv-endpoint");
      break;
    case Reach::kAccepts:
      cause =
          "the port accepts TCP connections but no gRPC server answered there "
          "(is it "
          "musterd?) — check --rdzv-endpoint";
      break;
    case Reach::kError:
      cause = absl::StrCat(probe.detail,
                           " — check --rdzv-endpoint and the network");
      break;
  }
  return absl::UnavailableError(
      absl::StrCat("cannot reach the ", what, " at ", target.ToString(),
                   " within ", absl::FormatDuration(timeout), ": ", cause));
}

}  // namespace muster::rendezvous
