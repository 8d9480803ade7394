// The one adapter from gRPC outcomes to absl::Status (muster's error type), and
// back:
//   - call statuses: both use the canonical codes, so codes map 1:1 and
//   messages are kept;
//   - channels that cannot connect: UNAVAILABLE with the endpoint and the cause
//   found by a TCP
//     probe (refused, no answer, unresolvable name, not a gRPC server).
#ifndef MUSTER_STORE_GRPC_STATUS_H_
#define MUSTER_STORE_GRPC_STATUS_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/status.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "muster/common/net.h"

namespace muster::store {

// Same code, same message. OK maps to OK.
grpc::Status ToGrpcStatus(const absl::Status& status);
// Same code, same message (the details string is dropped). OK maps to OK.
absl::Status FromGrpcStatus(const grpc::Status& status);

// An insecure channel to `target` with muster's channel arguments: reconnect
// backoff short enough that a server started a moment later is found quickly,
// and keepalive pings (10 s) so that a cut network or a frozen server ends a
// stream instead of leaving it hanging. Never null.
std::shared_ptr<grpc::Channel> NewMusterChannel(const HostPort& target);

// The leader a standby named in a finished call's trailing metadata
// (kLeaderMetadataKey), or empty.
std::string LeaderFromTrailers(const grpc::ClientContext& context);

enum class ChannelWait {
  // The server may come up later (an agent started before musterd): keep
  // trying for the whole timeout.
  kPatient,
  // A one-shot command (`muster status`): fail at once when a TCP probe says
  // the server is not there (refused, rejected, unreachable, unresolvable);
  // wait only through silence, which may be a slow network.
  kFailFast,
};

// Waits until `channel` is connected, for at most `timeout`. Errors:
// UNAVAILABLE "cannot reach the <what> at H:P within 10s: <cause> — <fix>",
// where the cause comes from a TCP probe at the end of the wait (nothing
// listening / no answer / unresolvable / rejected / not gRPC). Blocks up to
// `timeout`.
//
// When the channel fails while the port is open, a TLS probe tells a
// plaintext/TLS mismatch (or a failed TLS handshake) apart and the wait ends
// at once with UNAVAILABLE naming TLS and the fix. `client_tls`: whether the
// channel uses TLS.
absl::Status WaitForChannel(grpc::Channel& channel, const HostPort& target,
                            absl::string_view what, absl::Duration timeout,
                            ChannelWait wait = ChannelWait::kPatient,
                            bool client_tls = false);

}  // namespace muster::store

#endif  // MUSTER_STORE_GRPC_STATUS_H_
