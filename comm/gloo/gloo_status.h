// The one adapter from Gloo's exceptions to absl::Status. Every call into Gloo
// goes through CallGloo, so no exception leaves libmuster_comm.
//
// Gloo 0.5.0 (Debian's 2022 snapshot) throws:
//   gloo::IoException    socket errors and timeouts of a pair ("Connection
//                        closed by peer", "Read error [addr]: ...", "Timed
//                        out waiting ...", "Connect timeout");
//   gloo::Exception,     everything else (bad options, failed lookups);
//   gloo::EnforceNotMet
// and muster's own store adapter throws StoreError, which carries the store's
// absl::Status through Gloo.
#ifndef MUSTER_COMM_GLOO_GLOO_STATUS_H_
#define MUSTER_COMM_GLOO_GLOO_STATUS_H_

#include <exception>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "gloo/common/error.h"

namespace muster::comm::internal {

// An error of muster's Store raised inside a Gloo callback
// (gloo::rendezvous::Store returns void). It travels through Gloo as an
// IoException and comes back out as the original status.
class StoreError : public ::gloo::IoException {
 public:
  explicit StoreError(absl::Status status);
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

// Where in the life of a communicator a Gloo call failed; it decides what a
// generic failure means (a lookup that fails while making the device is a
// configuration error, not a lost peer).
enum class GlooStage { kDevice, kConnect, kCollective };

// Converts the exception being handled (call only inside a catch block) into a
// status:
//   StoreError                          its own status;
//   IoException with a timeout message  DEADLINE_EXCEEDED;
//   IoException, peer closed or reset   ABORTED (the peer was lost);
//   other IoException                   UNAVAILABLE;
//   other Gloo errors                   FAILED_PRECONDITION at kDevice,
//                                       else INTERNAL;
//   std::bad_alloc                      RESOURCE_EXHAUSTED;
//   anything else                       INTERNAL or UNKNOWN.
// The message is "<what>: <Gloo's message>", plus "(peer rank N)" when the
// message names a peer: peer_addresses[r] is the text Gloo prints for rank r's
// listening address (empty for unknown ranks and for this rank).
absl::Status StatusFromCurrentException(
    GlooStage stage, absl::string_view what,
    absl::Span<const std::string> peer_addresses = {});

// Runs fn(), converting whatever it throws with StatusFromCurrentException.
template <typename Fn>
absl::Status CallGloo(GlooStage stage, absl::string_view what,
                      absl::Span<const std::string> peer_addresses, Fn&& fn) {
  try {
    std::forward<Fn>(fn)();
    return absl::OkStatus();
  } catch (...) {
    return StatusFromCurrentException(stage, what, peer_addresses);
  }
}

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_GLOO_GLOO_STATUS_H_
