#include "comm/select/select.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "comm/direct/direct_backend.h"
#include "comm/gloo/gloo_communicator.h"
#include "comm/gloo/gloo_device.h"
#include "comm/nccl/nccl_backend.h"
#include "comm/shm/shm_backend.h"
#include "comm/src/environment.h"
#include "comm/src/missing_peers.h"
#include "muster/common/logging.h"
#include "muster/common/status.h"

namespace muster::comm::internal {
namespace {

// This rank's mesh kind: "direct" when MUSTER_COMM_MESH=direct, else
// "gloo-" + `gloo_transport`. Sets *forced when the variable chose it.
// INVALID_ARGUMENT for a value other than auto or direct.
absl::StatusOr<std::string> MeshKind(absl::string_view gloo_transport,
                                     bool* forced) {
  *forced = false;
  const char* env = GetEnv("MUSTER_COMM_MESH");
  const std::string value =
      env == nullptr ? "auto" : absl::AsciiStrToLower(env);
  if (value == "direct") {
    *forced = true;
    return std::string("direct");
  }
  if (value != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable MUSTER_COMM_MESH='", env,
                     "' is not auto or direct (direct: libmuster_comm's own "
                     "mesh instead of Gloo's, as jobs mixing Linux and Windows "
                     "ranks run)"));
  }
  return absl::StrCat("gloo-", gloo_transport);
}

// Publishes this rank's mesh kind and reads every rank's. Returns "" when all
// agree, else who runs what ("rank 0: gloo-TCP, rank 1: gloo-libuv").
absl::StatusOr<std::string> MeshMismatch(const CoreConfig& config,
                                         const std::string& mine,
                                         absl::Time deadline) {
  const int n = config.world_size;
  if (n < 2) return std::string();
  const std::string root = absl::StrCat(config.key_prefix, "mesh/");
  const std::string who = absl::StrCat("rank ", config.rank, "/", n);
  MUSTER_RETURN_IF_ERROR(
      Annotate(config.store->Set(absl::StrCat(root, config.rank), mine),
               absl::StrCat(who, ": publishing its mesh kind")));
  std::vector<std::string> keys;
  for (int r = 0; r < n; ++r) keys.push_back(absl::StrCat(root, r));
  absl::StatusOr<std::vector<std::string>> kinds = config.store->MultiGet(
      keys, std::max(deadline - absl::Now(), absl::Milliseconds(1)));
  if (!kinds.ok()) {
    absl::Status status = Annotate(
        kinds.status(), absl::StrCat(who, ": reading every rank's mesh kind"));
    if (!absl::IsDeadlineExceeded(status)) return status;
    return DescribeMissingPeers(status, *config.store, root, config.rank, n,
                                config.options.timeout);
  }
  if (std::all_of(kinds->begin(), kinds->end(),
                  [&](const std::string& k) { return k == mine; })) {
    return std::string();
  }
  std::vector<std::string> each;
  for (int r = 0; r < n; ++r)
    each.push_back(absl::StrCat("rank ", r, ": ", (*kinds)[r]));
  return absl::StrJoin(each, ", ");
}

// Gloo, whose small allreduces run on the direct mesh.
absl::StatusOr<std::unique_ptr<Backend>> ConnectGlooWithDirect(
    const CoreConfig& config, absl::Time deadline) {
  return ConnectGloo(config, deadline, ConnectDirectAllReduce);
}

// The host-memory backend: Gloo, with the shared-memory transport in front
// of it where ranks share a host (comm/shm/shm_backend.h).
absl::StatusOr<std::unique_ptr<Backend>> ConnectHost(const CoreConfig& config,
                                                     absl::Time deadline) {
  CoreConfig gloo_config = config;
  if (gloo_config.options.allreduce_algorithm == AllReduceAlgorithm::kShm) {
    // What Gloo runs when shared memory does not apply.
    gloo_config.options.allreduce_algorithm = AllReduceAlgorithm::kAuto;
  }
  // Gloo's TCP (Linux) and libuv (Windows) transports do not interoperate:
  // a job with both runs on libmuster_comm's own mesh (direct_backend.h).
  bool forced = false;
  MUSTER_ASSIGN_OR_RETURN(const std::string mine,
                          MeshKind(GlooTransportName(), &forced));
  MUSTER_ASSIGN_OR_RETURN(const std::string mismatch,
                          MeshMismatch(config, mine, deadline));
  absl::StatusOr<std::unique_ptr<Backend>> gloo;
  if (mismatch.empty() && !forced) {
    gloo = ConnectGlooWithDirect(gloo_config, deadline);
  } else {
    const std::string why =
        mismatch.empty() ? "MUSTER_COMM_MESH=direct" : mismatch;
    if (config.rank == 0) {
      MUSTER_LOG(WARNING)
          << "rank 0/" << config.world_size
          << ": the ranks cannot share a Gloo mesh (" << why
          << "): collectives run on libmuster_comm's own mesh (AllReduce, "
             "AllGather, Broadcast, Barrier)";
    }
    gloo = ConnectDirectBackend(config, why, deadline);
  }
  if (!gloo.ok()) return gloo.status();
  // The hosts' leaders meet on a Gloo mesh.
  return WithSharedMemory(config, std::move(*gloo), deadline,
                          ConnectGlooWithDirect);
}

}  // namespace

absl::Status ConnectBackends(const CoreConfig& config, absl::Time deadline,
                             Backends& backends) {
  backends.is_device_pointer = IsDevicePointer;
  const std::string who =
      absl::StrCat("rank ", config.rank, "/", config.world_size);
  switch (config.options.backend) {
    case comm::Backend::kGloo: {
      MUSTER_ASSIGN_OR_RETURN(backends.host, ConnectHost(config, deadline));
      break;
    }
    case comm::Backend::kNccl: {
      MUSTER_ASSIGN_OR_RETURN(
          backends.device,
          ShrinkOrConnectNccl(config, backends.previous_device, deadline));
      break;
    }
    case comm::Backend::kAuto: {
      MUSTER_ASSIGN_OR_RETURN(backends.host, ConnectHost(config, deadline));
      // NCCL joins only when every rank can run it; rank 0 decides from every
      // rank's answer, so no rank waits in NCCL for one that never comes.
      std::string why_not;
      const bool can = NcclUsable(&why_not);
      absl::StatusOr<bool> all =
          AgreeOnNccl(*config.store, config.key_prefix, config.rank,
                      config.world_size, can, deadline);
      if (!all.ok()) return Annotate(all.status(), who);
      if (*all) {
        absl::StatusOr<std::unique_ptr<Backend>> nccl =
            ShrinkOrConnectNccl(config, backends.previous_device, deadline);
        if (nccl.ok()) {
          backends.device = std::move(*nccl);
        } else {
          MUSTER_LOG(WARNING)
              << who << ": NCCL could not start (" << nccl.status()
              << "): falling back to Gloo; device buffers "
                 "will be refused";
        }
      } else if (can) {
        MUSTER_LOG(WARNING) << who
                            << ": NCCL is usable here but not on every rank: "
                               "falling back to Gloo";
      } else {
        MUSTER_LOG(DEBUG) << who << ": backend auto: Gloo only (" << why_not
                          << ")";
      }
      break;
    }
  }
  return absl::OkStatus();
}

}  // namespace muster::comm::internal
