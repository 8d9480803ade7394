#include "comm/src/missing_peers.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace muster::comm::internal {

absl::Status DescribeMissingPeers(const absl::Status& status,
                                  store::Store& store,
                                  const std::string& key_prefix, int rank,
                                  int world_size, absl::Duration timeout) {
  auto published = [&](int r) {
    return store.Get(absl::StrCat(key_prefix, r), absl::ZeroDuration()).ok();
  };
  // This rank's own key tells whether the keys are still named "<rank>".
  if (!published(rank)) return status;
  std::vector<int> missing;
  for (int r = 0; r < world_size; ++r) {
    if (r != rank && !published(r)) missing.push_back(r);
  }
  if (missing.empty()) return status;
  const std::string who = absl::StrCat("rank ", rank, "/", world_size, ": ");
  absl::string_view detail = status.message();
  absl::ConsumePrefix(&detail, who);
  return absl::DeadlineExceededError(absl::StrCat(
      who, missing.size() == 1 ? "rank " : "ranks ",
      absl::StrJoin(missing, ", "), " did not join within ",
      absl::FormatDuration(timeout),
      " (is every rank running, with the same WORLD_SIZE? MUSTER_COMM_TIMEOUT "
      "raises the limit); ",
      detail));
}

}  // namespace muster::comm::internal
