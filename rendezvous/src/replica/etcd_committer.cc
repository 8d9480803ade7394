#include "rendezvous/src/replica/etcd_committer.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "muster/common/logging.h"

namespace muster::rendezvous {

EtcdCommitter::EtcdCommitter(EtcdClient* etcd, EtcdCommitterOptions options)
    : etcd_(etcd), options_(std::move(options)) {
  thread_ = std::thread([this] { Loop(); });
}

EtcdCommitter::~EtcdCommitter() { Stop(); }

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

void EtcdCommitter::CommitDrop(std::string ns_prefix) {
  absl::MutexLock lock(&mu_);
  Item item;
  item.kind = Item::Kind::kDeleteRange;
  item.key = absl::StrCat(options_.store_prefix, ns_prefix);
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
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id())
    thread_.join();
  Batch left;
  {
    absl::MutexLock lock(&mu_);
    for (Item& item : queue_) {
      for (auto& d : item.done) left.done.push_back(std::move(d));
    }
    queue_.clear();
  }
  Fail(left, absl::UnavailableError(
                 "this musterd stopped leading before the write committed"));
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
    if (next.kind == Item::Kind::kDeleteRange) {
      // A range delete overlaps the puts around it, which etcd refuses in
      // one transaction: it goes alone.
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
      case Item::Kind::kDeleteRange: {
        etcdserverpb::DeleteRangeRequest* del =
            txn.add_success()->mutable_request_delete_range();
        del->set_key(item.key);
        del->set_range_end(PrefixRangeEnd(item.key));
        ++ops;
        break;
      }
      case Item::Kind::kBarrier:
        break;
    }
  }
  if (ops == 0) return absl::OkStatus();  // barriers only: nothing to send
  absl::StatusOr<etcdserverpb::TxnResponse> response =
      etcd_->Txn(txn, options_.commit_timeout);
  if (!response.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "a Store commit could not reach etcd: ", response.status().message()));
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
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      batch = TakeBatchLocked();
      failed = failed_;
    }
    if (!failed.ok()) {
      Fail(batch, absl::UnavailableError(absl::StrCat(
                      "this musterd no longer leads: ", failed.message())));
      continue;
    }
    absl::Status sent = Send(batch.items);
    {
      absl::MutexLock lock(&mu_);
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
