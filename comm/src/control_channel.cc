#include "comm/src/control_channel.h"

#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "muster/platform/env.h"
#include "muster/platform/files.h"

namespace muster::comm::internal {
namespace {

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<ControlChannel>> ControlChannel::Open(
    const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "MUSTER_CONTROL_DIR=", dir,
        " is not a directory: the agent creates it for each worker under "
        "--recovery=in-place; unset it to run without the control channel"));
  }
  // Once per process and directory: the agent compares the pid with the
  // process it started, and a second communicator changes nothing.
  static absl::Mutex* mu = new absl::Mutex;
  static std::set<std::string>* said_hello = new std::set<std::string>;
  {
    absl::MutexLock lock(mu);
    if (said_hello->count(dir) == 0) {
      const std::string hello =
          common::FormatControlHello(platform::ProcessId(), "libmuster_comm");
      // Not flushed to the disk: it means nothing once this process is gone.
      absl::Status written = platform::WriteFileAtomically(
          dir + "/hello", hello, 0600, platform::Durability::kVolatile);
      if (!written.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("opening the control channel in ", dir,
                         ": cannot write hello: ", written.message()));
      }
      said_hello->insert(dir);
    }
  }
  return std::shared_ptr<ControlChannel>(new ControlChannel(dir));
}

std::optional<RoundInfo> ControlChannel::Read() {
  std::string text = ReadSmallFile(dir_ + "/round");
  absl::MutexLock lock(&mu_);
  if (text == last_text_) return last_;
  absl::StatusOr<RoundInfo> info = common::ParseControlRound(text);
  last_text_ = std::move(text);
  last_ = info.ok() ? std::optional<RoundInfo>(*std::move(info)) : std::nullopt;
  return last_;
}

bool RoundState::CheckChanged() {
  if (ended_.load(std::memory_order_acquire)) return true;
  std::optional<RoundInfo> info = channel_->Read();
  if (!info.has_value()) return false;
  bool changed = false;
  {
    absl::MutexLock lock(&mu_);
    changed = info->seq != seq_ && (!info->running || info->round > round_);
  }
  if (!changed) return false;
  End(generation(),
      absl::AbortedError(info->reason.empty()
                             ? std::string(info->running
                                               ? "a newer round is running"
                                               : "the next round is forming")
                             : info->reason));
  return true;
}

void RoundState::End(int64_t generation, const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (ended_.load() || generation != generation_.load()) return;
  ended_why_ = std::string(why.message());
  ended_.store(true, std::memory_order_release);
}

absl::Status RoundState::EndedStatus(absl::string_view what,
                                     int64_t formed_round, bool is_group) {
  std::string why;
  {
    absl::MutexLock lock(&mu_);
    why = ended_why_;
  }
  // The agent's reason, when it has written one, says more than our own
  // failure ("node host-b (ranks 4..5) lost").
  std::optional<RoundInfo> info = channel_->Read();
  if (info.has_value() && !info->reason.empty() &&
      info->round >= formed_round &&
      (!info->running || info->round > formed_round)) {
    why = info->reason;
  }
  const std::string round =
      formed_round >= 0 ? absl::StrCat("round ", formed_round) : "the round";
  if (is_group) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": this group was made in ", round, ", which ended",
                     why.empty() ? "" : absl::StrCat(" (", why, ")"),
                     "; make the group again with NewGroup() after Recover()"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat(what, ": ", round, " ended",
                   why.empty() ? "" : absl::StrCat(" (", why, ")"),
                   "; call Recover() to join the next round"));
}

void RoundState::Formed(int64_t seq, int64_t round) {
  absl::MutexLock lock(&mu_);
  seq_ = seq;
  round_ = round;
  ended_why_.clear();
  generation_.fetch_add(1, std::memory_order_acq_rel);
  ended_.store(false, std::memory_order_release);
}

}  // namespace muster::comm::internal
