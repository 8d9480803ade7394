#include "muster/store/kv_store.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace muster::store {

absl::Status KvStore::CheckOpenLocked(absl::string_view ns) const {
  if (!closed_.contains(ns)) return absl::OkStatus();
  return absl::AbortedError(
      absl::StrCat("store namespace '", ns,
                   "' was dropped: its round has ended (join the next round)"));
}

absl::Status KvStore::CheckWriteLocked(absl::string_view ns, const Namespace* n,
                                       absl::string_view key,
                                       absl::string_view value,
                                       int64_t* added_keys,
                                       int64_t* added_bytes) const {
  if (absl::Status open = CheckOpenLocked(ns); !open.ok()) return open;
  const int64_t key_bytes = static_cast<int64_t>(key.size());
  const int64_t value_bytes = static_cast<int64_t>(value.size());
  if (key_bytes > limits_.max_key_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "store key of ", key_bytes, " bytes is longer than the limit of ",
        limits_.max_key_bytes, " bytes (musterd --store-max-key-bytes)"));
  }
  if (value_bytes > limits_.max_value_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("store value of ", value_bytes, " bytes for key '", key,
                     "' is larger than the limit of ", limits_.max_value_bytes,
                     " bytes (musterd --store-max-value-bytes)"));
  }
  const std::string* old = nullptr;
  if (n != nullptr) {
    auto it = n->entries.find(key);
    if (it != n->entries.end()) old = &it->second;
  }
  if (old == nullptr) {
    *added_keys += 1;
    *added_bytes += key_bytes + value_bytes;
  } else {
    *added_bytes += value_bytes - static_cast<int64_t>(old->size());
  }
  const int64_t keys =
      (n == nullptr ? 0 : static_cast<int64_t>(n->entries.size())) +
      *added_keys;
  const int64_t bytes = (n == nullptr ? 0 : n->bytes) + *added_bytes;
  if (keys > limits_.max_namespace_keys) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the store namespace '", ns, "' would hold ", keys,
        " keys, above its quota of ", limits_.max_namespace_keys,
        " (musterd --store-max-keys); delete keys the job no longer needs"));
  }
  if (bytes > limits_.max_namespace_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the store namespace '", ns, "' would hold ", bytes,
        " bytes, above its quota of ", limits_.max_namespace_bytes,
        " bytes (musterd --store-max-bytes); the store is for bootstrap "
        "data, not for bulk data"));
  }
  return absl::OkStatus();
}

void KvStore::PutLocked(Namespace& n, absl::string_view key,
                        std::string value) {
  auto [it, inserted] = n.entries.try_emplace(key);
  if (inserted) {
    n.bytes += static_cast<int64_t>(key.size());
  } else {
    n.bytes -= static_cast<int64_t>(it->second.size());
  }
  n.bytes += static_cast<int64_t>(value.size());
  it->second = std::move(value);
  version_.fetch_add(1, std::memory_order_relaxed);
}

std::map<std::string, std::map<std::string, std::string>> KvStore::Snapshot()
    const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, std::map<std::string, std::string>> out;
  for (const auto& [name, n] : data_)
    out[name] =
        std::map<std::string, std::string>(n.entries.begin(), n.entries.end());
  return out;
}

absl::Status KvStore::Set(absl::string_view ns, absl::string_view key,
                          absl::string_view value) {
  std::vector<std::pair<WaitCallback, std::vector<std::string>>> ready;
  {
    absl::MutexLock lock(&mu_);
    auto found = data_.find(ns);
    int64_t keys = 0, bytes = 0;
    absl::Status fits =
        CheckWriteLocked(ns, found == data_.end() ? nullptr : &found->second,
                         key, value, &keys, &bytes);
    if (!fits.ok()) return fits;
    PutLocked(data_[ns], key, std::string(value));
    CollectReadyLocked(std::string(ns), &ready);
  }
  for (auto& [done, values] : ready) done(std::move(values));
  return absl::OkStatus();
}

absl::StatusOr<std::string> KvStore::Get(absl::string_view ns,
                                         absl::string_view key) const {
  absl::MutexLock lock(&mu_);
  if (absl::Status open = CheckOpenLocked(ns); !open.ok()) return open;
  auto n = data_.find(ns);
  if (n != data_.end()) {
    auto it = n->second.entries.find(key);
    if (it != n->second.entries.end()) return it->second;
  }
  return absl::NotFoundError(absl::StrCat("key '", key, "' is not set"));
}

absl::StatusOr<int64_t> KvStore::Add(absl::string_view ns,
                                     absl::string_view key, int64_t delta) {
  std::vector<std::pair<WaitCallback, std::vector<std::string>>> ready;
  int64_t result = 0;
  {
    absl::MutexLock lock(&mu_);
    // Before the value's check: a dropped namespace has no value to judge.
    if (absl::Status open = CheckOpenLocked(ns); !open.ok()) return open;
    auto found = data_.find(ns);
    int64_t current = 0;
    if (found != data_.end()) {
      auto it = found->second.entries.find(key);
      if (it != found->second.entries.end() && !it->second.empty() &&
          !absl::SimpleAtoi(it->second, &current)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Add on key '", key, "': its value is not an integer"));
      }
    }
    result = current + delta;
    std::string text = absl::StrCat(result);
    int64_t keys = 0, bytes = 0;
    absl::Status fits =
        CheckWriteLocked(ns, found == data_.end() ? nullptr : &found->second,
                         key, text, &keys, &bytes);
    if (!fits.ok()) return fits;
    PutLocked(data_[ns], key, std::move(text));
    CollectReadyLocked(std::string(ns), &ready);
  }
  for (auto& [done, values] : ready) done(std::move(values));
  return result;
}

absl::StatusOr<std::string> KvStore::CompareSet(absl::string_view ns,
                                                absl::string_view key,
                                                absl::string_view expected,
                                                absl::string_view desired) {
  std::vector<std::pair<WaitCallback, std::vector<std::string>>> ready;
  std::string result;
  {
    absl::MutexLock lock(&mu_);
    // Before the comparison: one that does not swap answers a value too.
    if (absl::Status open = CheckOpenLocked(ns); !open.ok()) return open;
    auto found = data_.find(ns);
    const std::string* current = nullptr;
    if (found != data_.end()) {
      auto it = found->second.entries.find(key);
      if (it != found->second.entries.end()) current = &it->second;
    }
    const bool swap =
        current == nullptr ? expected.empty() : *current == expected;
    if (!swap) return current == nullptr ? std::string() : *current;
    int64_t keys = 0, bytes = 0;
    absl::Status fits =
        CheckWriteLocked(ns, found == data_.end() ? nullptr : &found->second,
                         key, desired, &keys, &bytes);
    if (!fits.ok()) return fits;
    PutLocked(data_[ns], key, std::string(desired));
    result = std::string(desired);
    CollectReadyLocked(std::string(ns), &ready);
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
    if (absl::Status open = CheckOpenLocked(ns); !open.ok()) return open;
    auto found = data_.find(ns);
    const Namespace* n = found == data_.end() ? nullptr : &found->second;
    // All or nothing. A key named twice is counted as new twice: a slightly
    // strict quota, never a loose one.
    int64_t added_keys = 0, added_bytes = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      absl::Status fits = CheckWriteLocked(ns, n, keys[i], values[i],
                                           &added_keys, &added_bytes);
      if (!fits.ok()) return fits;
    }
    Namespace& target = data_[ns];
    for (size_t i = 0; i < keys.size(); ++i) {
      PutLocked(target, keys[i], values[i]);
    }
    CollectReadyLocked(std::string(ns), &ready);
  }
  for (auto& [done, vals] : ready) done(std::move(vals));
  return absl::OkStatus();
}

absl::StatusOr<bool> KvStore::Delete(absl::string_view ns,
                                     absl::string_view key) {
  absl::MutexLock lock(&mu_);
  if (absl::Status open = CheckOpenLocked(ns); !open.ok()) return open;
  auto n = data_.find(ns);
  if (n == data_.end()) return false;
  auto it = n->second.entries.find(key);
  if (it == n->second.entries.end()) return false;
  n->second.bytes -= static_cast<int64_t>(key.size() + it->second.size());
  n->second.entries.erase(it);
  version_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

absl::StatusOr<int64_t> KvStore::CountKeys(absl::string_view ns) const {
  absl::MutexLock lock(&mu_);
  if (absl::Status open = CheckOpenLocked(ns); !open.ok()) return open;
  auto n = data_.find(ns);
  return n == data_.end() ? 0 : static_cast<int64_t>(n->second.entries.size());
}

int64_t KvStore::NumKeys(absl::string_view ns) const {
  absl::MutexLock lock(&mu_);
  auto n = data_.find(ns);
  return n == data_.end() ? 0 : static_cast<int64_t>(n->second.entries.size());
}

KvStore::Usage KvStore::NamespaceUsage(absl::string_view ns) const {
  absl::MutexLock lock(&mu_);
  auto n = data_.find(ns);
  if (n == data_.end()) return {};
  return {static_cast<int64_t>(n->second.entries.size()), n->second.bytes};
}

KvStore::WaiterId KvStore::WaitFor(absl::string_view ns,
                                   std::vector<std::string> keys,
                                   WaitCallback done) {
  std::vector<std::string> values;
  absl::Status open;
  {
    absl::MutexLock lock(&mu_);
    open = CheckOpenLocked(ns);
    if (open.ok()) {
      auto n = data_.find(ns);
      bool all = true;
      for (const std::string& k : keys) {
        if (n == data_.end()) {
          all = false;
          break;
        }
        auto it = n->second.entries.find(k);
        if (it == n->second.entries.end()) {
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
  }
  if (open.ok()) {
    done(std::move(values));
  } else {
    done(std::move(open));
  }
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
      if (n == data_.end() || !n->second.entries.contains(k))
        missing.push_back(k);
    }
    message = absl::StrCat(
        why.message(), " (keys not set: ", absl::StrJoin(missing, ", "), ")");
    done = std::move(it->second.done);
    waiters_.erase(it);
  }
  done(absl::Status(why.code(), message));
}

void KvStore::DropNamespace(absl::string_view ns) {
  std::vector<std::pair<std::string, WaitCallback>> failed;
  {
    absl::MutexLock lock(&mu_);
    DropNamespaceLocked(std::string(ns), &failed);
    std::string forget = CloseLocked(ns);
    // In the same critical section: no write can slip between the drop here
    // and the drop in the replicas' log.
    if (committer_ != nullptr) {
      committer_->CommitClose(std::string(ns), std::move(forget));
    }
  }
  FailDropped(failed);
}

std::string KvStore::CloseLocked(absl::string_view ns) {
  if (!closed_.insert(std::string(ns)).second) return "";
  closed_order_.emplace_back(ns);
  if (closed_order_.size() <= kMaxClosedNamespaces) return "";
  std::string oldest = std::move(closed_order_.front());
  closed_order_.pop_front();
  closed_.erase(oldest);
  return oldest;
}

void KvStore::DropNamespacesWithPrefix(absl::string_view prefix) {
  std::vector<std::pair<std::string, WaitCallback>> failed;
  {
    absl::MutexLock lock(&mu_);
    absl::flat_hash_set<std::string> names;
    for (const auto& [name, unused] : data_) {
      if (absl::StartsWith(name, prefix)) names.insert(name);
    }
    for (const auto& [id, w] : waiters_) {
      if (absl::StartsWith(w.ns, prefix)) names.insert(w.ns);
    }
    for (const auto& [name, unused] : pending_ns_) {
      if (absl::StartsWith(name, prefix)) names.insert(name);
    }
    for (const std::string& n : names) DropNamespaceLocked(n, &failed);
    for (auto it = closed_order_.begin(); it != closed_order_.end();) {
      if (absl::StartsWith(*it, prefix)) {
        closed_.erase(*it);
        it = closed_order_.erase(it);
      } else {
        ++it;
      }
    }
    if (committer_ != nullptr) committer_->CommitDrop(std::string(prefix));
  }
  FailDropped(failed);
}

void KvStore::DropNamespaceLocked(
    const std::string& ns,
    std::vector<std::pair<std::string, WaitCallback>>* failed) {
  if (data_.erase(ns) > 0) version_.fetch_add(1, std::memory_order_relaxed);
  // Writes in flight in it are not applied when they commit.
  auto pending = pending_ns_.find(ns);
  if (pending != pending_ns_.end()) ++pending->second.generation;
  std::vector<WaitCallback> waiters;
  FailWaitersLocked(ns, &waiters);
  for (auto& w : waiters) failed->emplace_back(ns, std::move(w));
}

void KvStore::FailDropped(
    std::vector<std::pair<std::string, WaitCallback>>& failed) {
  for (auto& [ns, done] : failed) {
    done(absl::AbortedError(absl::StrCat(
        "store namespace '", ns, "' was dropped: its round has ended")));
  }
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
      auto v = n->second.entries.find(k);
      if (v == n->second.entries.end()) {
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

void KvStore::SetCommitter(Committer* committer) {
  absl::MutexLock lock(&mu_);
  committer_ = committer;
}

const std::string* KvStore::ViewLocked(absl::string_view ns,
                                       absl::string_view key) const {
  auto p = pending_.find(PendingKey(ns, key));
  if (p != pending_.end()) {
    return p->second.value.has_value() ? &*p->second.value : nullptr;
  }
  auto n = data_.find(ns);
  if (n == data_.end()) return nullptr;
  auto it = n->second.entries.find(key);
  return it == n->second.entries.end() ? nullptr : &it->second;
}

void KvStore::SubmitLocked(std::vector<Committer::Write> writes,
                           absl::AnyInvocable<void(absl::Status)> done) {
  std::vector<uint64_t> generations;
  generations.reserve(writes.size());
  for (const Committer::Write& w : writes) {
    Pending& p = pending_[PendingKey(w.ns, w.key)];
    p.value = w.erase ? std::nullopt : std::optional<std::string>(w.value);
    ++p.count;
    PendingNamespace& n = pending_ns_[w.ns];
    ++n.count;
    generations.push_back(n.generation);
  }
  // The batch's writes travel to the committer and back in the callback,
  // which applies them.
  auto shared = std::make_shared<std::vector<Committer::Write>>(writes);
  committer_->Commit(std::move(writes),
                     [this, shared, generations = std::move(generations),
                      done = std::move(done)](absl::Status status) mutable {
                       ApplyCommitted(*shared, generations, status);
                       done(std::move(status));
                     });
}

void KvStore::ApplyCommitted(const std::vector<Committer::Write>& writes,
                             const std::vector<uint64_t>& generations,
                             const absl::Status& status) {
  std::vector<std::pair<WaitCallback, std::vector<std::string>>> ready;
  {
    absl::MutexLock lock(&mu_);
    absl::flat_hash_set<std::string> touched;
    for (size_t i = 0; i < writes.size(); ++i) {
      const Committer::Write& w = writes[i];
      auto p = pending_.find(PendingKey(w.ns, w.key));
      if (p != pending_.end() && --p->second.count == 0) pending_.erase(p);
      auto n = pending_ns_.find(w.ns);
      const bool dropped =
          n != pending_ns_.end() && n->second.generation != generations[i];
      if (n != pending_ns_.end() && --n->second.count == 0)
        pending_ns_.erase(n);
      if (!status.ok() || dropped) continue;
      if (w.erase) {
        auto ns = data_.find(w.ns);
        if (ns == data_.end()) continue;
        auto it = ns->second.entries.find(w.key);
        if (it == ns->second.entries.end()) continue;
        ns->second.bytes -=
            static_cast<int64_t>(w.key.size() + it->second.size());
        ns->second.entries.erase(it);
        version_.fetch_add(1, std::memory_order_relaxed);
      } else {
        PutLocked(data_[w.ns], w.key, w.value);
        touched.insert(w.ns);
      }
    }
    for (const std::string& ns : touched) CollectReadyLocked(ns, &ready);
  }
  for (auto& [done, values] : ready) done(std::move(values));
}

void KvStore::SetAsync(absl::string_view ns, absl::string_view key,
                       absl::string_view value, StatusCallback done) {
  absl::ReleasableMutexLock lock(&mu_);
  if (committer_ == nullptr) {
    lock.Release();
    done(Set(ns, key, value));
    return;
  }
  auto found = data_.find(ns);
  int64_t keys = 0, bytes = 0;
  absl::Status fits =
      CheckWriteLocked(ns, found == data_.end() ? nullptr : &found->second, key,
                       value, &keys, &bytes);
  if (!fits.ok()) {
    lock.Release();
    done(std::move(fits));
    return;
  }
  SubmitLocked({{std::string(ns), std::string(key), false, std::string(value)}},
               std::move(done));
}

void KvStore::AddAsync(absl::string_view ns, absl::string_view key,
                       int64_t delta, Int64Callback done) {
  absl::ReleasableMutexLock lock(&mu_);
  if (committer_ == nullptr) {
    lock.Release();
    done(Add(ns, key, delta));
    return;
  }
  if (absl::Status open = CheckOpenLocked(ns); !open.ok()) {
    lock.Release();
    done(std::move(open));
    return;
  }
  int64_t current = 0;
  const std::string* now = ViewLocked(ns, key);
  if (now != nullptr && !now->empty() && !absl::SimpleAtoi(*now, &current)) {
    lock.Release();
    done(absl::InvalidArgumentError(
        absl::StrCat("Add on key '", key, "': its value is not an integer")));
    return;
  }
  const int64_t result = current + delta;
  std::string text = absl::StrCat(result);
  auto found = data_.find(ns);
  int64_t keys = 0, bytes = 0;
  absl::Status fits =
      CheckWriteLocked(ns, found == data_.end() ? nullptr : &found->second, key,
                       text, &keys, &bytes);
  if (!fits.ok()) {
    lock.Release();
    done(std::move(fits));
    return;
  }
  SubmitLocked({{std::string(ns), std::string(key), false, std::move(text)}},
               [result, done = std::move(done)](absl::Status s) mutable {
                 if (s.ok()) {
                   done(result);
                 } else {
                   done(std::move(s));
                 }
               });
}

void KvStore::CompareSetAsync(absl::string_view ns, absl::string_view key,
                              absl::string_view expected,
                              absl::string_view desired, StringCallback done) {
  absl::ReleasableMutexLock lock(&mu_);
  if (committer_ == nullptr) {
    lock.Release();
    done(CompareSet(ns, key, expected, desired));
    return;
  }
  // Before the comparison: the values in flight of a dropped namespace are
  // never applied, and no answer may name one.
  if (absl::Status open = CheckOpenLocked(ns); !open.ok()) {
    lock.Release();
    done(std::move(open));
    return;
  }
  const std::string* now = ViewLocked(ns, key);
  const bool swap = now == nullptr ? expected.empty() : *now == expected;
  if (!swap) {
    // Nothing to write, but the answer must not be a value that is not
    // committed yet: it waits behind the writes in flight (an empty batch).
    std::string current = now == nullptr ? std::string() : *now;
    SubmitLocked({}, [current = std::move(current),
                      done = std::move(done)](absl::Status s) mutable {
      if (s.ok()) {
        done(std::move(current));
      } else {
        done(std::move(s));
      }
    });
    return;
  }
  auto found = data_.find(ns);
  int64_t keys = 0, bytes = 0;
  absl::Status fits =
      CheckWriteLocked(ns, found == data_.end() ? nullptr : &found->second, key,
                       desired, &keys, &bytes);
  if (!fits.ok()) {
    lock.Release();
    done(std::move(fits));
    return;
  }
  SubmitLocked(
      {{std::string(ns), std::string(key), false, std::string(desired)}},
      [value = std::string(desired),
       done = std::move(done)](absl::Status s) mutable {
        if (s.ok()) {
          done(std::move(value));
        } else {
          done(std::move(s));
        }
      });
}

void KvStore::MultiSetAsync(absl::string_view ns,
                            absl::Span<const std::string> keys,
                            absl::Span<const std::string> values,
                            StatusCallback done) {
  absl::ReleasableMutexLock lock(&mu_);
  if (committer_ == nullptr || keys.size() != values.size()) {
    lock.Release();
    done(MultiSet(ns, keys, values));
    return;
  }
  if (absl::Status open = CheckOpenLocked(ns); !open.ok()) {
    lock.Release();
    done(std::move(open));
    return;
  }
  auto found = data_.find(ns);
  const Namespace* n = found == data_.end() ? nullptr : &found->second;
  int64_t added_keys = 0, added_bytes = 0;
  std::vector<Committer::Write> writes;
  for (size_t i = 0; i < keys.size(); ++i) {
    absl::Status fits =
        CheckWriteLocked(ns, n, keys[i], values[i], &added_keys, &added_bytes);
    if (!fits.ok()) {
      lock.Release();
      done(std::move(fits));
      return;
    }
    writes.push_back({std::string(ns), keys[i], false, values[i]});
  }
  SubmitLocked(std::move(writes), std::move(done));
}

void KvStore::DeleteAsync(absl::string_view ns, absl::string_view key,
                          BoolCallback done) {
  absl::ReleasableMutexLock lock(&mu_);
  if (committer_ == nullptr) {
    lock.Release();
    done(Delete(ns, key));
    return;
  }
  if (absl::Status open = CheckOpenLocked(ns); !open.ok()) {
    lock.Release();
    done(std::move(open));
    return;
  }
  const bool existed = ViewLocked(ns, key) != nullptr;
  SubmitLocked({{std::string(ns), std::string(key), true, std::string()}},
               [existed, done = std::move(done)](absl::Status s) mutable {
                 if (s.ok()) {
                   done(existed);
                 } else {
                   done(std::move(s));
                 }
               });
}

}  // namespace muster::store
