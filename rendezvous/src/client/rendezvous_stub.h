// The connection the one-shot commands (`muster status`, `muster stacks`)
// open to one musterd replica: one channel, connected or failed fast.
#ifndef MUSTER_RENDEZVOUS_SRC_RENDEZVOUS_STUB_H_
#define MUSTER_RENDEZVOUS_SRC_RENDEZVOUS_STUB_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "muster/common/net.h"
#include "muster/store/security.h"
#include "muster/v1/rendezvous.grpc.pb.h"

namespace muster::rendezvous {

// A Rendezvous stub over a channel to `target` (TLS and the token from
// `security`) that connected within `connect`. Failing fast: the caller asks
// another replica next. Errors: NewSecureMusterChannel's and WaitForChannel's
// (UNAVAILABLE naming the target, and TLS with the fix on a mismatch).
absl::StatusOr<std::unique_ptr<v1::Rendezvous::Stub>> ConnectRendezvous(
    const HostPort& target, const store::ClientSecurity& security,
    absl::Duration connect);

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_RENDEZVOUS_STUB_H_
