// Internal pieces of the factories (api/init.cc), shared with NewGroup, the C
// API and the tests.
#ifndef MUSTER_COMM_API_INIT_H_
#define MUSTER_COMM_API_INIT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "comm/src/backend.h"
#include "comm/src/core.h"
#include "muster/comm/communicator.h"
#include "muster/store/store.h"

namespace muster::comm::internal {

// "ring" -> kRing, ...; INVALID_ARGUMENT listing the names otherwise.
absl::StatusOr<AllReduceAlgorithm> ParseAllReduceAlgorithm(
    absl::string_view text);

struct InterfaceChoice {
  std::string name;    // "eth0"
  std::string ip;      // its first IPv4 address, else its first IPv6 one
  std::string reason;  // "MUSTER_SOCKET_IFNAME=^docker"
};

// Picks an interface that is up and has an address by NCCL's syntax: "eth"
// (the first whose name starts with eth), "=eth0" (exactly), "^docker,lo"
// (the first matching none; a non-loopback one preferred), comma lists.
// `source` names where the spec came from, for messages. Errors:
// FAILED_PRECONDITION listing the interfaces there are.
absl::StatusOr<InterfaceChoice> SelectInterface(absl::string_view spec,
                                                absl::string_view source);

// Every key of libmuster_comm in the round's store lives under this prefix.
inline constexpr char kKeyRoot[] = "muster_comm/";

// Create's work once the store is known: options resolved against the
// environment, the interface chosen, the communicator's key namespace counted
// under `key_root`, the backends connected. `base` carries the control
// channel's fields of CoreConfig (round, is_group, previous_*), if any;
// `previous_device` is the ended round's NCCL backend (Recover).
absl::StatusOr<std::unique_ptr<CommCore>> ConnectCore(
    std::shared_ptr<store::Store> store, int rank, int world_size,
    const CommOptions& options, bool all_local, const std::string& key_root,
    CoreConfig base = {}, std::unique_ptr<Backend> previous_device = nullptr);

// ConnectCore, wrapped in a Communicator.
absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(
    std::shared_ptr<store::Store> store, int rank, int world_size,
    const CommOptions& options, bool all_local, const std::string& key_root,
    CoreConfig base = {});

// The control channel for Init/FromEnvironment (and Create when
// options.control_dir is set): opened in options.control_dir, else
// MUSTER_CONTROL_DIR (not for Create); `base` gets the round fields. Without
// either, nothing. Errors: ControlChannel::Open's.
absl::Status BindControlChannel(const CommOptions& options, bool from_env,
                                CoreConfig& base);

// Tests only: makes `comm` behave as a crashed process would toward its peers
// (every connection closed without a goodbye) and breaks it.
void CrashForTesting(Communicator& comm);

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_API_INIT_H_
