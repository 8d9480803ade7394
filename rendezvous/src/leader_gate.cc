#include "rendezvous/src/leader_gate.h"

#include "absl/strings/str_cat.h"

namespace muster::rendezvous {

absl::Status LeaderGate::Check() const {
  if (serving()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
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
  return serving() ? std::string() : leader_;
}

void LeaderGate::Lead() {
  absl::MutexLock lock(&mu_);
  leader_.clear();
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
  if (!l.empty()) context.AddTrailingMetadata(kLeaderMetadataKey, l);
}

std::string LeaderFromTrailers(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find(kLeaderMetadataKey);
  if (it == trailers.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

}  // namespace muster::rendezvous
