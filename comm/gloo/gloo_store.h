// Gloo's rendezvous store over muster's Store seam, so that Gloo bootstraps
// through the round's key-value store (musterd's Store service, or an
// InMemoryStore in tests).
#ifndef MUSTER_COMM_STORE_GLOO_STORE_H_
#define MUSTER_COMM_STORE_GLOO_STORE_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gloo/rendezvous/store.h"
#include "muster/store/store.h"

namespace muster::comm::internal {

// Every key Gloo uses is put under `prefix` (so several communicators can share
// one round's store). Errors of the muster store are thrown as StoreError
// (comm/gloo/gloo_status.h), which CallGloo turns back into the original
// status. Thread-safe, as the underlying store.
class GlooStore : public ::gloo::rendezvous::Store {
 public:
  // `default_timeout` bounds get(), and wait() when Gloo passes no timeout.
  GlooStore(std::shared_ptr<store::Store> store, std::string prefix,
            absl::Duration default_timeout);

  void set(const std::string& key, const std::vector<char>& data) override;

  // Gloo expects get to block until the key exists (as its own stores do):
  // waits up to the default timeout.
  std::vector<char> get(const std::string& key) override;

  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // The key in the muster store that Gloo's `key` maps to.
  std::string FullKey(const std::string& key) const { return prefix_ + key; }

 private:
  const std::shared_ptr<store::Store> store_;
  const std::string prefix_;
  const absl::Duration default_timeout_;
};

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_STORE_GLOO_STORE_H_
