// GetStatus paging: the bounds of a page and its opaque token,
// without transport. The service parses a request into a StatusPageQuery,
// the Coordinator fills the page (Coordinator::StatusPage) and writes the
// token of the next one.
//
// A token names the last job id of the page it ends ("p1." + the id in
// web-safe base64): the next page lists the jobs whose ids sort after it, so
// paging is stable when jobs come and go in between (a job created behind
// the cursor shows up in the next listing, not twice).
#ifndef MUSTER_RENDEZVOUS_SRC_STATUS_PAGE_H_
#define MUSTER_RENDEZVOUS_SRC_STATUS_PAGE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "muster/rendezvous/coordinator.h"
#include "muster/v1/rendezvous.pb.h"

namespace muster::rendezvous {

// Jobs per page when the request names none (page_size 0), and the most a
// request may ask for.
inline constexpr int kDefaultStatusPageSize = 1000;
inline constexpr int kMaxStatusPageSize = 10000;
// Bytes of jobs per page: a quarter of gRPC's default 4 MiB message limit,
// whatever the jobs' sizes.
inline constexpr int64_t kStatusPageBytes = int64_t{1} << 20;

// The token of the page that follows the job `last_job_id`.
std::string StatusPageTokenAfter(absl::string_view last_job_id);

// The query of a request (visible left null). Errors: INVALID_ARGUMENT naming
// the field and the fix, for a page_size outside 0..kMaxStatusPageSize and a
// page_token that no server made.
absl::StatusOr<StatusPageQuery> StatusPageQueryOf(
    const v1::GetStatusRequest& request);

}  // namespace muster::rendezvous

#endif  // MUSTER_RENDEZVOUS_SRC_STATUS_PAGE_H_
