#include "rendezvous/src/core/outbox.h"

#include <cstdint>
#include <utility>

#include "absl/time/clock.h"

namespace muster::rendezvous {

void Outbox::Send(std::shared_ptr<AgentChannel> channel,
                  std::shared_ptr<const v1::ServerMessage> msg) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(Delivery{std::move(channel), std::move(msg), {}});
}

void Outbox::Close(std::shared_ptr<AgentChannel> channel, absl::Status status) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(Delivery{std::move(channel), nullptr, std::move(status)});
}

void Outbox::Deliver(std::vector<Delivery>& batch) {
  for (Delivery& d : batch) {
    if (d.msg != nullptr) {
      d.channel->SendShared(std::move(d.msg));
    } else {
      d.channel->Close(d.close_status);
    }
  }
}

void Outbox::Flush() {
  std::vector<Delivery> batch;
  {
    absl::MutexLock lock(&mu_);
    if (flushing_) return;  // the thread delivering takes ours too
    flushing_ = true;
  }
  const absl::Time start = absl::Now();
  int64_t delivered = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      batch.clear();
      if (queue_.empty() ||
          (delivered >= kFlushQuota && absl::Now() - start >= kFlushBudget)) {
        flushing_ = false;  // the rest (if any) goes with the next Flush
        return;
      }
      batch.swap(queue_);
    }
    delivered += static_cast<int64_t>(batch.size());
    Deliver(batch);
  }
}

void Outbox::Drain() {
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](bool* flushing) { return !*flushing; }, &flushing_));
    flushing_ = true;
  }
  std::vector<Delivery> batch;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      batch.clear();
      if (queue_.empty()) {
        flushing_ = false;
        return;
      }
      batch.swap(queue_);
    }
    Deliver(batch);
  }
}

}  // namespace muster::rendezvous
