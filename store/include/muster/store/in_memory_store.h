// A Store inside one process, over a shared KvStore namespace: N ranks run as
// threads on one InMemoryStore in tests (as gloo's own tests do). Thread-safe.
#ifndef MUSTER_STORE_IN_MEMORY_STORE_H_
#define MUSTER_STORE_IN_MEMORY_STORE_H_

#include <memory>
#include <string>

#include "muster/store/kv_store.h"
#include "muster/store/store.h"

namespace muster::store {

class InMemoryStore : public Store {
 public:
  // A store with its own data.
  InMemoryStore();
  // A view of namespace `ns` of a shared KvStore (several views may share one).
  InMemoryStore(std::shared_ptr<KvStore> kv, std::string ns);

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key,
                                         absl::string_view expected,
                                         absl::string_view desired) override;
  absl::Status Wait(absl::Span<const std::string> keys,
                    absl::Duration timeout) override;
  absl::StatusOr<std::vector<std::string>> MultiGet(
      absl::Span<const std::string> keys, absl::Duration timeout) override;
  absl::Status MultiSet(absl::Span<const std::string> keys,
                        absl::Span<const std::string> values) override;
  absl::StatusOr<bool> Delete(absl::string_view key) override;
  absl::StatusOr<int64_t> NumKeys() override;
  // True: its clients are threads of this process.
  bool HostLocal() const override { return true; }

 private:
  const std::shared_ptr<KvStore> kv_;
  const std::string ns_;
};

}  // namespace muster::store

#endif  // MUSTER_STORE_IN_MEMORY_STORE_H_
