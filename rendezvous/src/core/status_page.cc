#include "rendezvous/src/core/status_page.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "muster/common/ids.h"

namespace muster::rendezvous {
namespace {
constexpr absl::string_view kTokenPrefix = "p1.";
}  // namespace

std::string StatusPageTokenAfter(absl::string_view last_job_id) {
  return absl::StrCat(kTokenPrefix, absl::WebSafeBase64Escape(last_job_id));
}

absl::StatusOr<StatusPageQuery> StatusPageQueryOf(
    const v1::GetStatusRequest& request) {
  StatusPageQuery query;
  query.job_id = request.job_id();
  query.max_bytes = kStatusPageBytes;
  if (request.page_size() < 0 || request.page_size() > kMaxStatusPageSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GetStatus: page_size ", request.page_size(), " is out of range; ask ",
        "for 1 to ", kMaxStatusPageSize,
        " jobs per page, or 0 for the default (", kDefaultStatusPageSize, ")"));
  }
  query.page_size =
      request.page_size() == 0 ? kDefaultStatusPageSize : request.page_size();
  const std::string& token = request.page_token();
  if (token.empty()) return query;
  std::string after;
  if (!absl::StartsWith(token, kTokenPrefix) ||
      !absl::WebSafeBase64Unescape(token.substr(kTokenPrefix.size()), &after) ||
      !IsValidId(after)) {
    constexpr size_t kShown = 64;
    return absl::InvalidArgumentError(absl::StrCat(
        "GetStatus: page_token '", absl::CHexEscape(token.substr(0, kShown)),
        token.size() > kShown ? "...'" : "'",
        " is not one this server gave; pass the next_page_token of the "
        "previous response unchanged, or none for the first page"));
  }
  query.after = std::move(after);
  return query;
}

}  // namespace muster::rendezvous
