#include "agent/src/lease_fence.h"

#include <algorithm>

namespace muster::agent {

LeaseFence::LeaseFence(absl::Duration lease, Clock* clock)
    : lease_(lease), clock_(clock) {}

int64_t LeaseFence::NextSeq() {
  absl::MutexLock lock(&mu_);
  const int64_t seq = next_seq_++;
  sent_[static_cast<size_t>(seq % kSlots)] = Sent{seq, clock_->Now()};
  return seq;
}

void LeaseFence::OnRenewed(int64_t seq) {
  absl::MutexLock lock(&mu_);
  if (seq <= 0) return;
  const Sent& s = sent_[static_cast<size_t>(seq % kSlots)];
  if (s.seq != seq) return;  // never sent, or overwritten by a newer one
  const absl::Time end = s.at + lease_;
  lease_end_ =
      lease_end_ == absl::InfiniteFuture() ? end : std::max(lease_end_, end);
}

bool LeaseFence::armed() const {
  absl::MutexLock lock(&mu_);
  return lease_end_ != absl::InfiniteFuture();
}

absl::Time LeaseFence::LeaseEnd() const {
  absl::MutexLock lock(&mu_);
  return lease_end_;
}

absl::Time LeaseFence::FenceAt() const {
  absl::MutexLock lock(&mu_);
  if (lease_end_ == absl::InfiniteFuture()) return lease_end_;
  return lease_end_ - lease_ * 3 / 10;
}

bool LeaseFence::FenceDue() const { return clock_->Now() >= FenceAt(); }

bool LeaseFence::LastsFor(absl::Duration d) const {
  const absl::Time fence_at = FenceAt();
  return fence_at != absl::InfiniteFuture() && fence_at - clock_->Now() >= d;
}

}  // namespace muster::agent
