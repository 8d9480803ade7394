#include "rendezvous/src/service/leader_gate.h"

#include "absl/strings/str_cat.h"

namespace muster::rendezvous {

bool LeaderGate::serving() const {
  if (!serving_.load(std::memory_order_acquire)) return false;
  const int64_t until = valid_until_ns_.load(std::memory_order_acquire);
  if (until == 0) return true;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
             .count() < until;
}

void LeaderGate::SetValidUntil(std::chrono::steady_clock::time_point until) {
  const int64_t now_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now().time_since_epoch())
          .count();
  const int64_t prev = valid_until_ns_.exchange(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          until.time_since_epoch())
          .count(),
      std::memory_order_acq_rel);
  if (prev != 0 && now_ns >= prev)
    lapses_.fetch_add(1, std::memory_order_acq_rel);
}

absl::Status LeaderGate::Check() const {
  if (serving()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (serving_.load(std::memory_order_acquire)) {
    return absl::UnavailableError(absl::StrCat(
        "musterd ", self_,
        " leads but could not confirm it with etcd lately (etcd slow or "
        "unreachable from it); retry in a moment"));
  }
  if (leader_.empty()) {
    return absl::UnavailableError(
        absl::StrCat("musterd ", self_,
                     " is a standby replica and no replica leads yet (an "
                     "election is under way); retry in a moment"));
  }
  return absl::UnavailableError(absl::StrCat(
      "musterd ", self_, " is a standby replica; the leader is ", leader_));
}

std::string LeaderGate::leader() const {
  absl::MutexLock lock(&mu_);
  return serving_.load(std::memory_order_acquire) ? std::string() : leader_;
}

void LeaderGate::Lead(int64_t epoch) {
  absl::MutexLock lock(&mu_);
  leader_.clear();
  epoch_.store(epoch, std::memory_order_release);
  serving_.store(true, std::memory_order_release);
}

void LeaderGate::StandBy(absl::string_view self, absl::string_view leader) {
  absl::MutexLock lock(&mu_);
  serving_.store(false, std::memory_order_release);
  self_ = std::string(self);
  leader_ = std::string(leader);
}

void LeaderGate::AddLeaderTrailer(grpc::ServerContextBase& context) const {
  const std::string l = leader();
  if (!l.empty()) context.AddTrailingMetadata(store::kLeaderMetadataKey, l);
}

}  // namespace muster::rendezvous
