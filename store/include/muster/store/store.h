// The Store seam: a key-value store shared by the ranks of one round, through
// which workers and the comm library bootstrap (Gloo addresses, NCCL unique
// ids). Its implementations:
// clang-format off
//   InMemoryStore  in one process (N ranks as threads in tests).
//   GrpcStore      musterd's Store service, namespaced by the round's store prefix
//                  (muster/store/grpc_store.h).
//   FileStore      a file shared by the ranks of one host (comm's file:// init method,
//                  muster/store/file_store.h).
//   ServedStore    rank 0 of comm's tcp:// (and env:// without the launcher): a Store
//                  that owns the server it talks to
//                  (comm/store/grpc_store_factory.cc).
// clang-format on
#ifndef MUSTER_STORE_STORE_H_
#define MUSTER_STORE_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace muster::store {

// Thread-safe: every method may be called from any thread at once.
class Store {
 public:
  virtual ~Store() = default;

  // Stores value at key, replacing what was there, and wakes waiters. Does not
  // block beyond I/O. Errors: UNAVAILABLE when the server cannot be reached.
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;

  // Returns the value at key, waiting up to `timeout` for it to be set. A zero
  // timeout does not wait. Errors: NOT_FOUND (zero timeout, absent),
  // DEADLINE_EXCEEDED naming the key, ABORTED when the round's namespace was
  // dropped while waiting, UNAVAILABLE.
  virtual absl::StatusOr<std::string> Get(absl::string_view key,
                                          absl::Duration timeout) = 0;

  // Adds delta to the decimal integer at key (absent counts as 0) and returns
  // the result. Errors: INVALID_ARGUMENT when the value there is not an
  // integer, UNAVAILABLE.
  virtual absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) = 0;

  // Sets key to desired when its current value equals expected (an absent key
  // matches an empty expected). Returns the value stored afterwards. Errors:
  // UNAVAILABLE.
  virtual absl::StatusOr<std::string> CompareSet(absl::string_view key,
                                                 absl::string_view expected,
                                                 absl::string_view desired) = 0;

  // Blocks until every key exists or `timeout` passes. Errors:
  // DEADLINE_EXCEEDED naming the missing keys, ABORTED, UNAVAILABLE.
  virtual absl::Status Wait(absl::Span<const std::string> keys,
                            absl::Duration timeout) = 0;

  // Returns the values of keys in order, waiting up to `timeout` for all of
  // them.
  virtual absl::StatusOr<std::vector<std::string>> MultiGet(
      absl::Span<const std::string> keys, absl::Duration timeout) = 0;

  // Sets keys[i] to values[i]. INVALID_ARGUMENT when the sizes differ.
  virtual absl::Status MultiSet(absl::Span<const std::string> keys,
                                absl::Span<const std::string> values) = 0;

  // Removes key. Returns whether it existed.
  virtual absl::StatusOr<bool> Delete(absl::string_view key) = 0;

  // The number of keys in this store's namespace.
  virtual absl::StatusOr<int64_t> NumKeys() = 0;

  // Whether every client of this store runs on this machine (a store inside
  // one process, a file): the ranks sharing it reach each other on loopback.
  // False when the store cannot tell (a network store). Never blocks.
  virtual bool HostLocal() const { return false; }
};

}  // namespace muster::store

#endif  // MUSTER_STORE_STORE_H_
