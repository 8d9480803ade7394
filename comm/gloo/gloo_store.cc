#include "comm/gloo/gloo_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/gloo/gloo_status.h"
#include "muster/common/status.h"

namespace muster::comm::internal {

GlooStore::GlooStore(std::shared_ptr<store::Store> store, std::string prefix,
                     absl::Duration default_timeout)
    : store_(std::move(store)),
      prefix_(std::move(prefix)),
      default_timeout_(default_timeout) {}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  absl::Status status =
      store_->Set(FullKey(key), absl::string_view(data.data(), data.size()));
  if (!status.ok()) {
    throw StoreError(
        Annotate(status, absl::StrCat("store set ", FullKey(key))));
  }
}

std::vector<char> GlooStore::get(const std::string& key) {
  absl::StatusOr<std::string> value =
      store_->Get(FullKey(key), default_timeout_);
  if (!value.ok()) {
    throw StoreError(
        Annotate(value.status(), absl::StrCat("store get ", FullKey(key))));
  }
  return std::vector<char>(value->begin(), value->end());
}

void GlooStore::wait(const std::vector<std::string>& keys) {
  wait(keys, std::chrono::milliseconds::zero());
}

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  // Gloo passes zero (kNoTimeout) for "no limit"; muster always keeps one.
  const absl::Duration limit =
      timeout.count() > 0 ? absl::FromChrono(timeout) : default_timeout_;
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& key : keys) full.push_back(FullKey(key));
  absl::Status status = store_->Wait(full, limit);
  if (!status.ok()) {
    throw StoreError(Annotate(
        status, absl::StrCat("store wait for ", absl::StrJoin(full, ", "))));
  }
}

}  // namespace muster::comm::internal
