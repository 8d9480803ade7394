#include "rendezvous/src/replica/etcd_committer.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "muster/common/logging.h"

namespace muster::rendezvous {

EtcdCommitter::EtcdCommitter(EtcdClient* etcd, EtcdCommitterOptions options)
    : etcd_(etcd), options_(std::move(options)) {
  thread_ = std::thread([this] { Loop(); });
}

EtcdCommitter::~EtcdCommitter() {
  Stop();
  {
    absl::MutexLock lock(&mu_);
    exiting_ = true;
  }
  if (!thread_.joinable()) return;
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // destroyed from its own callback: it returns next
  } else {
    thread_.join();
  }
}

void EtcdCommitter::Commit(std::vector<Write> writes,
                           absl::AnyInvocable<void(absl::Status)> done) {
  absl::MutexLock lock(&mu_);
  for (Write& w : writes) {
    Item item;
    item.kind = w.erase ? Item::Kind::kDelete : Item::Kind::kPut;
    item.key = absl::StrCat(options_.store_prefix, w.ns, "/", w.key);
    item.value = std::move(w.value);
    queue_.push_back(std::move(item));
  }
  if (queue_.empty() || writes.empty()) {
    Item barrier;
    barrier.kind = Item::Kind::kBarrier;
    queue_.push_back(std::move(barrier));
  }
  queue_.back().done.push_back(std::move(done));
}

namespace {

void AddRangeDelete(std::vector<etcdserverpb::RequestOp>& ops,
                    std::string prefix) {
  etcdserverpb::DeleteRangeRequest* del =
      ops.emplace_back().mutable_request_delete_range();
  del->set_range_end(PrefixRangeEnd(prefix));
  del->set_key(std::move(prefix));
}

}  // namespace

void EtcdCommitter::CommitClose(std::string ns, std::string forget) {
  Item item;
  item.kind = Item::Kind::kAlone;
  // One transaction: no leader after this one finds the keys gone but the
  // namespace open (it would accept writes a worker of the ended round
  // makes), nor the namespace closed with keys of it loaded.
  AddRangeDelete(item.ops, absl::StrCat(options_.store_prefix, ns, "/"));
  if (!options_.closed_prefix.empty()) {
    etcdserverpb::PutRequest* put =
        item.ops.emplace_back().mutable_request_put();
    put->set_key(absl::StrCat(options_.closed_prefix, ns));
    put->set_value(
        absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone()));
    if (!forget.empty()) {
      item.ops.emplace_back().mutable_request_delete_range()->set_key(
          absl::StrCat(options_.closed_prefix, forget));
    }
  }
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(item));
}

void EtcdCommitter::CommitDrop(std::string ns_prefix) {
  Item item;
  item.kind = Item::Kind::kAlone;
  AddRangeDelete(item.ops, absl::StrCat(options_.store_prefix, ns_prefix));
  if (!options_.closed_prefix.empty()) {
    AddRangeDelete(item.ops, absl::StrCat(options_.closed_prefix, ns_prefix));
  }
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(item));
}

void EtcdCommitter::CommitKey(std::string key, std::string value, bool erase) {
  absl::MutexLock lock(&mu_);
  Item item;
  item.kind = erase ? Item::Kind::kDelete : Item::Kind::kPut;
  item.key = std::move(key);
  item.value = std::move(value);
  queue_.push_back(std::move(item));
}

void EtcdCommitter::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  // The committer's thread fails what is queued and what comes later: a
  // write handed over after Stop (the store still points here) is answered
  // too, and never on its caller's thread (KvStore holds its lock there).
  if (thread_.get_id() == std::this_thread::get_id()) return;
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !sending_; };
  mu_.Await(absl::Condition(&idle));
}

int64_t EtcdCommitter::transactions() const {
  absl::MutexLock lock(&mu_);
  return transactions_;
}

int64_t EtcdCommitter::writes() const {
  absl::MutexLock lock(&mu_);
  return writes_;
}

EtcdCommitter::Batch EtcdCommitter::TakeBatchLocked() {
  Batch batch;
  std::vector<Item>& items = batch.items;
  // A key's index in the batch: a later write of it replaces the earlier
  // one (etcd refuses a transaction naming a key twice; the result is the
  // same, since they are applied in order).
  absl::flat_hash_map<std::string, size_t> index;
  int ops = 0;
  int64_t bytes = 0;
  auto take_done = [&batch](Item& item) {
    for (auto& d : item.done) batch.done.push_back(std::move(d));
    item.done.clear();
  };
  while (!queue_.empty()) {
    Item& next = queue_.front();
    if (next.kind == Item::Kind::kAlone) {
      if (!items.empty()) break;
      take_done(next);
      items.push_back(std::move(next));
      queue_.pop_front();
      break;
    }
    if (next.kind == Item::Kind::kBarrier) {
      take_done(next);
      queue_.pop_front();
      continue;
    }
    auto found = index.find(next.key);
    if (found != index.end()) {
      Item& same = items[found->second];
      bytes += static_cast<int64_t>(next.value.size()) -
               static_cast<int64_t>(same.value.size());
      same.kind = next.kind;
      same.value = std::move(next.value);
      take_done(next);
      queue_.pop_front();
      continue;
    }
    const int64_t size =
        static_cast<int64_t>(next.key.size() + next.value.size());
    if (ops > 0 &&
        (ops + 1 > options_.max_ops || bytes + size > options_.max_bytes)) {
      break;
    }
    index.emplace(next.key, items.size());
    take_done(next);
    items.push_back(std::move(next));
    queue_.pop_front();
    ++ops;
    bytes += size;
  }
  return batch;
}

absl::Status EtcdCommitter::Send(const std::vector<Item>& items) {
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* guard = txn.add_compare();
  guard->set_result(etcdserverpb::Compare::EQUAL);
  guard->set_target(etcdserverpb::Compare::CREATE);
  guard->set_key(options_.leader_key);
  guard->set_create_revision(options_.leader_revision);
  int ops = 0;
  for (const Item& item : items) {
    switch (item.kind) {
      case Item::Kind::kPut: {
        etcdserverpb::PutRequest* put =
            txn.add_success()->mutable_request_put();
        put->set_key(item.key);
        put->set_value(item.value);
        ++ops;
        break;
      }
      case Item::Kind::kDelete:
        txn.add_success()->mutable_request_delete_range()->set_key(item.key);
        ++ops;
        break;
      case Item::Kind::kAlone:
        for (const etcdserverpb::RequestOp& op : item.ops) {
          *txn.add_success() = op;
          ++ops;
        }
        break;
      case Item::Kind::kBarrier:
        break;
    }
  }
  if (ops == 0) return absl::OkStatus();  // barriers only: nothing to send
  const absl::Time give_up = absl::Now() + options_.commit_timeout;
  absl::StatusOr<etcdserverpb::TxnResponse> response;
  for (int attempt = 1;; ++attempt) {
    response = etcd_->Txn(
        txn, std::min(options_.attempt_timeout,
                      std::max(give_up - absl::Now(), absl::Milliseconds(1))));
    if (response.ok()) break;
    const bool retry = absl::IsUnavailable(response.status()) ||
                       absl::IsDeadlineExceeded(response.status());
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      stopping = stopping_;
    }
    if (!retry || stopping || absl::Now() >= give_up) {
      return absl::UnavailableError(absl::StrCat(
          "a Store commit could not reach etcd (", attempt, " tries in ",
          absl::FormatDuration(options_.commit_timeout),
          "): ", response.status().message()));
    }
    if (attempt == 1) {
      MUSTER_LOG(WARNING) << "replica: a commit is waiting for etcd (tried "
                             "again until "
                          << absl::FormatDuration(options_.commit_timeout)
                          << "): " << response.status().message();
    }
  }
  if (!response->succeeded()) {
    return absl::AbortedError(
        "fenced: this replica's election key is gone or another replica "
        "leads (its lease expired or was revoked)");
  }
  return absl::OkStatus();
}

void EtcdCommitter::Fail(Batch& batch, const absl::Status& why) {
  for (auto& d : batch.done) d(why);
  batch.done.clear();
}

void EtcdCommitter::Loop() {
  for (;;) {
    Batch batch;
    absl::Status failed;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return exiting_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // exiting, every write answered
      batch = TakeBatchLocked();
      if (stopping_) {
        failed = absl::UnavailableError(
            "this musterd stopped leading before the write committed");
      } else if (!failed_.ok()) {
        failed = absl::UnavailableError(
            absl::StrCat("this musterd no longer leads: ", failed_.message()));
      }
      sending_ = failed.ok();
    }
    if (!failed.ok()) {
      Fail(batch, failed);
      continue;
    }
    absl::Status sent = Send(batch.items);
    {
      absl::MutexLock lock(&mu_);
      sending_ = false;
      if (sent.ok()) {
        transactions_ += batch.items.empty() ? 0 : 1;
        writes_ += static_cast<int64_t>(batch.items.size());
      } else {
        failed_ = sent;
      }
    }
    if (sent.ok()) {
      for (auto& d : batch.done) d(absl::OkStatus());
      continue;
    }
    MUSTER_LOG(ERROR) << "replica: " << sent.message();
    Fail(batch, absl::UnavailableError(absl::StrCat(
                    "this musterd lost the leadership before the write "
                    "committed; retry on the new leader (",
                    sent.message(), ")")));
    if (options_.on_failure) options_.on_failure(sent);
  }
}

}  // namespace muster::rendezvous
