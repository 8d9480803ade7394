#include "muster/store/in_memory_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"

namespace muster::store {

InMemoryStore::InMemoryStore()
    : InMemoryStore(std::make_shared<KvStore>(), "") {}

InMemoryStore::InMemoryStore(std::shared_ptr<KvStore> kv, std::string ns)
    : kv_(std::move(kv)), ns_(std::move(ns)) {}

absl::Status InMemoryStore::Set(absl::string_view key,
                                absl::string_view value) {
  return kv_->Set(ns_, key, value);
}

absl::StatusOr<std::string> InMemoryStore::Get(absl::string_view key,
                                               absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) return kv_->Get(ns_, key);
  auto values = MultiGet({std::string(key)}, timeout);
  if (!values.ok()) return values.status();
  return std::move((*values)[0]);
}

absl::StatusOr<int64_t> InMemoryStore::Add(absl::string_view key,
                                           int64_t delta) {
  return kv_->Add(ns_, key, delta);
}

absl::StatusOr<std::string> InMemoryStore::CompareSet(
    absl::string_view key, absl::string_view expected,
    absl::string_view desired) {
  return kv_->CompareSet(ns_, key, expected, desired);
}

absl::Status InMemoryStore::Wait(absl::Span<const std::string> keys,
                                 absl::Duration timeout) {
  return MultiGet(keys, timeout).status();
}

absl::StatusOr<std::vector<std::string>> InMemoryStore::MultiGet(
    absl::Span<const std::string> keys, absl::Duration timeout) {
  // The callback may run on another thread after this one has given up, so the
  // result lives in shared state rather than on this stack.
  struct Result {
    absl::Notification done;
    absl::StatusOr<std::vector<std::string>> values;
  };
  auto result = std::make_shared<Result>();
  KvStore::WaiterId id =
      kv_->WaitFor(ns_, std::vector<std::string>(keys.begin(), keys.end()),
                   [result](absl::StatusOr<std::vector<std::string>> v) {
                     result->values = std::move(v);
                     result->done.Notify();
                   });
  if (id != 0 && !result->done.WaitForNotificationWithTimeout(timeout)) {
    kv_->CancelWait(
        id, absl::DeadlineExceededError(absl::StrCat(
                "store wait timed out after ", absl::FormatDuration(timeout))));
  }
  result->done.WaitForNotification();
  return std::move(result->values);
}

absl::Status InMemoryStore::MultiSet(absl::Span<const std::string> keys,
                                     absl::Span<const std::string> values) {
  return kv_->MultiSet(ns_, keys, values);
}

absl::StatusOr<bool> InMemoryStore::Delete(absl::string_view key) {
  return kv_->Delete(ns_, key);
}

absl::StatusOr<int64_t> InMemoryStore::NumKeys() { return kv_->CountKeys(ns_); }

}  // namespace muster::store
