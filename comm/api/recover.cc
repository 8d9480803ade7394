// In-place recovery (muster --recovery=in-place): Communicator::RoundChanged
// and Recover, which wait on the control channel (control_channel.h) for the
// next round and re-form every transport on it. The NCCL part of a re-formed
// core (shrink when only survivors remain) is nccl/nccl_shrink.cc's.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "comm/api/init.h"
#include "comm/src/control_channel.h"
#include "comm/src/core.h"
#include "muster/comm/communicator.h"
#include "muster/common/logging.h"
#include "muster/common/status.h"
#include "muster/store/grpc_store.h"
#include "muster/store/security.h"

namespace muster::comm {
namespace internal {
namespace {

// How often Recover reads `round` (the contract: 2 ms; the whole recovery
// target is 300 ms).
constexpr absl::Duration kRoundPoll = absl::Milliseconds(2);

// Polls the channel until it says "running" with a round greater than
// `after`, or `deadline`. DEADLINE_EXCEEDED names the directory, the round
// waited from, what the file said last, and the likely causes.
absl::StatusOr<RoundInfo> WaitForRound(ControlChannel& channel, int64_t after,
                                       absl::Time deadline,
                                       const std::string& who,
                                       const absl::Status& last_error) {
  std::optional<RoundInfo> info;
  while (true) {
    info = channel.Read();
    if (info.has_value() && info->running && info->round > after) return *info;
    if (absl::Now() >= deadline) break;
    absl::SleepFor(kRoundPoll);
  }
  std::string last = "no readable round file";
  if (info.has_value()) {
    last = absl::StrCat(info->running ? "running" : "changing", " round ",
                        info->round, " (seq ", info->seq, ")",
                        info->reason.empty() ? "" : ": ", info->reason);
  }
  return absl::DeadlineExceededError(absl::StrCat(
      who, ": Recover: no round after round ", after,
      " started in time (control channel ", channel.dir(), "; it says ", last,
      "): the agent is gone, or no round could form (fewer nodes than the "
      "minimum of --nnodes, or --max-restarts used up)",
      last_error.ok() ? ""
                      : absl::StrCat("; the last attempt to join failed: ",
                                     last_error.message())));
}

// The round's Store namespace with its credential; TLS as this worker's
// environment says.
absl::StatusOr<std::shared_ptr<store::Store>> OpenRoundStore(
    const RoundInfo& info, absl::Time deadline) {
  store::GrpcStoreOptions options;
  options.endpoint = info.store_endpoint;
  options.prefix = info.store_prefix;
  options.security = store::StoreSecurityFromEnv();
  options.security.token = info.store_token;
  // One writer per key (the library's bootstrap keys): a Set in flight
  // across a musterd failover is written again.
  options.repeat_sets_in_flight = true;
  options.connect_timeout =
      std::max(deadline - absl::Now(), absl::Milliseconds(1));
  absl::StatusOr<std::unique_ptr<store::Store>> store =
      store::NewGrpcStore(options);
  if (!store.ok()) {
    return Annotate(store.status(),
                    absl::StrCat("connecting to round ", info.round,
                                 "'s store at ", info.store_endpoint));
  }
  return std::shared_ptr<store::Store>(std::move(*store));
}

}  // namespace

}  // namespace internal

bool Communicator::RoundChanged() {
  const internal::CoreConfig& config = core_->config();
  if (config.round == nullptr) return false;
  if (config.round->Ended(config.round_generation)) return true;
  if (absl::Status broken = core_->BrokenStatus(); !broken.ok()) {
    // A lost peer, known to the monitor before any call reported it.
    config.round->End(config.round_generation, broken);
    return true;
  }
  return !config.is_group && config.round->CheckChanged();
}

absl::StatusOr<RecoverResult> Communicator::Recover(absl::Duration timeout) {
  const internal::CoreConfig& config = core_->config();
  const std::string who = core_->who();
  if (config.round == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        who,
        ": Recover() needs muster's control channel: run the program under "
        "`muster --recovery=in-place` (MUSTER_CONTROL_DIR is not set)"));
  }
  if (config.is_group) {
    return absl::FailedPreconditionError(absl::StrCat(
        who,
        ": Recover() is called on the communicator made by Init, "
        "FromEnvironment or Create, not on a group: make the group again with "
        "NewGroup() after it"));
  }
  if (core_->IsShutDown() && !config.round->Ended(config.round_generation)) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, ": Recover() called after Shutdown()"));
  }
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  const std::shared_ptr<internal::RoundState> state = config.round;
  const CommOptions options = config.options;
  RecoverResult result;
  result.previous_rank = config.rank;
  result.previous_world_size = config.world_size;
  const int64_t previous_round = state->round();
  const absl::Status ended = absl::AbortedError("Recover() was called");
  state->End(config.round_generation, ended);
  std::unique_ptr<internal::Backend> device =
      core_->EndForRecovery(absl::FailedPreconditionError(
          absl::StrCat(who, ": the round ended: Recover() was called")));

  int64_t after = previous_round;
  absl::Status last_error;
  while (true) {
    MUSTER_ASSIGN_OR_RETURN(internal::RoundInfo info,
                            internal::WaitForRound(state->channel(), after,
                                                   deadline, who, last_error));
    after = info.round;
    const std::string next = absl::StrCat(
        "rank ", info.rank, "/", info.world_size, " of round ", info.round);
    state->Formed(info.seq, info.round);
    absl::StatusOr<std::shared_ptr<store::Store>> store =
        internal::OpenRoundStore(info, deadline);
    absl::StatusOr<std::unique_ptr<internal::CommCore>> core =
        absl::UnknownError("unreachable");
    if (!store.ok()) {
      core = store.status();
    } else {
      internal::CoreConfig base;
      base.round = state;
      base.previous_rank = result.previous_rank;
      base.previous_world_size = result.previous_world_size;
      base.previous_round = previous_round;
      base.connect_deadline = deadline;
      core = internal::ConnectCore(
          std::move(*store), info.rank, info.world_size, options,
          info.local_world_size == info.world_size, internal::kKeyRoot,
          std::move(base), std::move(device));
    }
    if (core.ok()) {
      core_ = std::move(*core);
      result.rank = info.rank;
      result.world_size = info.world_size;
      result.round = info.round;
      MUSTER_LOG(DEBUG) << who << ": recovered as " << next << " in "
                        << absl::FormatDuration(absl::Now() - start);
      return result;
    }
    // This round ended too (a second loss while it formed): wait for the
    // next one, within the same deadline.
    last_error = Annotate(core.status(), absl::StrCat("joining as ", next));
    state->End(state->generation(), last_error);
    MUSTER_LOG(DEBUG) << who << ": Recover: " << last_error;
  }
}

}  // namespace muster::comm
