#include "muster/rendezvous/kv_store.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace muster::rendezvous {

void KvStore::Set(absl::string_view ns, absl::string_view key,
                  absl::string_view value) {
  std::vector<std::pair<WaitCallback, std::vector<std::string>>> ready;
  {
    absl::MutexLock lock(&mu_);
    data_[ns][key] = std::string(value);
    CollectReadyLocked(std::string(ns), &ready);
  }
  for (auto& [done, values] : ready) done(std::move(values));
}

absl::StatusOr<std::string> KvStore::Get(absl::string_view ns,
                                         absl::string_view key) const {
  absl::MutexLock lock(&mu_);
  auto n = data_.find(ns);
  if (n != data_.end()) {
    auto it = n->second.find(key);
    if (it != n->second.end()) return it->second;
  }
  return absl::NotFoundError(absl::StrCat("key '", key, "' is not set"));
}

absl::StatusOr<int64_t> KvStore::Add(absl::string_view ns,
                                     absl::string_view key, int64_t delta) {
  std::vector<std::pair<WaitCallback, std::vector<std::string>>> ready;
  int64_t result = 0;
  {
    absl::MutexLock lock(&mu_);
    std::string& slot = data_[ns][key];
    int64_t current = 0;
    if (!slot.empty() && !absl::SimpleAtoi(slot, &current)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Add on key '", key, "': its value is not an integer"));
    }
    result = current + delta;
    slot = absl::StrCat(result);
    CollectReadyLocked(std::string(ns), &ready);
  }
  for (auto& [done, values] : ready) done(std::move(values));
  return result;
}

std::string KvStore::CompareSet(absl::string_view ns, absl::string_view key,
                                absl::string_view expected,
                                absl::string_view desired) {
  std::vector<std::pair<WaitCallback, std::vector<std::string>>> ready;
  std::string result;
  {
    absl::MutexLock lock(&mu_);
    Namespace& n = data_[ns];
    auto it = n.find(key);
    if (it == n.end()) {
      if (expected.empty()) {
        n[key] = std::string(desired);
        result = std::string(desired);
        CollectReadyLocked(std::string(ns), &ready);
      }
    } else {
      if (it->second == expected) it->second = std::string(desired);
      result = it->second;
    }
  }
  for (auto& [done, values] : ready) done(std::move(values));
  return result;
}

absl::Status KvStore::MultiSet(absl::string_view ns,
                               absl::Span<const std::string> keys,
                               absl::Span<const std::string> values) {
  if (keys.size() != values.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MultiSet has ", keys.size(), " keys but ", values.size(), " values"));
  }
  std::vector<std::pair<WaitCallback, std::vector<std::string>>> ready;
  {
    absl::MutexLock lock(&mu_);
    Namespace& n = data_[ns];
    for (size_t i = 0; i < keys.size(); ++i) n[keys[i]] = values[i];
    CollectReadyLocked(std::string(ns), &ready);
  }
  for (auto& [done, vals] : ready) done(std::move(vals));
  return absl::OkStatus();
}

bool KvStore::Delete(absl::string_view ns, absl::string_view key) {
  absl::MutexLock lock(&mu_);
  auto n = data_.find(ns);
  if (n == data_.end()) return false;
  return n->second.erase(key) > 0;
}

int64_t KvStore::NumKeys(absl::string_view ns) const {
  absl::MutexLock lock(&mu_);
  auto n = data_.find(ns);
  return n == data_.end() ? 0 : static_cast<int64_t>(n->second.size());
}

KvStore::WaiterId KvStore::WaitFor(absl::string_view ns,
                                   std::vector<std::string> keys,
                                   WaitCallback done) {
  std::vector<std::string> values;
  {
    absl::MutexLock lock(&mu_);
    auto n = data_.find(ns);
    bool all = true;
    for (const std::string& k : keys) {
      if (n == data_.end()) {
        all = false;
        break;
      }
      auto it = n->second.find(k);
      if (it == n->second.end()) {
        all = false;
        break;
      }
      values.push_back(it->second);
    }
    if (!all) {
      WaiterId id = next_waiter_++;
      waiters_.emplace(
          id, Waiter{std::string(ns), std::move(keys), std::move(done)});
      return id;
    }
  }
  done(std::move(values));
  return 0;
}

void KvStore::CancelWait(WaiterId id, const absl::Status& why) {
  WaitCallback done;
  std::string message;
  {
    absl::MutexLock lock(&mu_);
    auto it = waiters_.find(id);
    if (it == waiters_.end()) return;
    std::vector<std::string> missing;
    auto n = data_.find(it->second.ns);
    for (const std::string& k : it->second.keys) {
      if (n == data_.end() || !n->second.contains(k)) missing.push_back(k);
    }
    message = absl::StrCat(
        why.message(), " (keys not set: ", absl::StrJoin(missing, ", "), ")");
    done = std::move(it->second.done);
    waiters_.erase(it);
  }
  done(absl::Status(why.code(), message));
}

void KvStore::DropNamespace(absl::string_view ns) {
  std::vector<WaitCallback> failed;
  {
    absl::MutexLock lock(&mu_);
    data_.erase(ns);
    FailWaitersLocked(std::string(ns), &failed);
  }
  for (auto& done : failed) {
    done(absl::AbortedError(absl::StrCat(
        "store namespace '", ns, "' was dropped: its round has ended")));
  }
}

void KvStore::DropNamespacesWithPrefix(absl::string_view prefix) {
  std::vector<std::string> names;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, unused] : data_) {
      if (absl::StartsWith(name, prefix)) names.push_back(name);
    }
    for (const auto& [id, w] : waiters_) {
      if (absl::StartsWith(w.ns, prefix)) names.push_back(w.ns);
    }
  }
  for (const std::string& n : names) DropNamespace(n);
}

int64_t KvStore::NamespaceCount() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(data_.size());
}

int64_t KvStore::PendingWaiters() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(waiters_.size());
}

void KvStore::CollectReadyLocked(
    const std::string& ns,
    std::vector<std::pair<WaitCallback, std::vector<std::string>>>* ready) {
  auto n = data_.find(ns);
  if (n == data_.end()) return;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    Waiter& w = it->second;
    if (w.ns != ns) {
      ++it;
      continue;
    }
    std::vector<std::string> values;
    bool all = true;
    for (const std::string& k : w.keys) {
      auto v = n->second.find(k);
      if (v == n->second.end()) {
        all = false;
        break;
      }
      values.push_back(v->second);
    }
    if (all) {
      ready->emplace_back(std::move(w.done), std::move(values));
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

void KvStore::FailWaitersLocked(const std::string& ns,
                                std::vector<WaitCallback>* failed) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->second.ns == ns) {
      failed->push_back(std::move(it->second.done));
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace muster::rendezvous
