// The NCCL (CUDA device memory) backend. Built when CMake finds CUDA and NCCL
// (MUSTER_WITH_NCCL); otherwise these functions say so and report no GPU.
#ifndef MUSTER_COMM_NCCL_NCCL_BACKEND_H_
#define MUSTER_COMM_NCCL_NCCL_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/src/backend.h"
#include "comm/src/core.h"
#include "muster/store/store.h"

namespace muster::comm::internal {

// Whether NCCL can run in this process: built with NCCL, and CUDA sees at
// least one device. Otherwise false with *why_not saying why ("this build has
// no NCCL", "cudaGetDeviceCount failed with error 35
// (cudaErrorInsufficientDriver: ...): no NVIDIA driver or no GPU", "CUDA sees
// no device"). Cached after the first call. Thread-safe.
bool NcclUsable(std::string* why_not);

// Whether p points to CUDA device (or managed) memory. False at once when
// NcclUsable() is false. Thread-safe.
bool IsDevicePointer(const void* p);

// Backend kAuto: every rank publishes whether it can run NCCL; rank 0 decides
// (all of them can) and publishes the decision, which every rank returns.
// Blocks until rank 0 has decided or `deadline`. Errors: the store's.
absl::StatusOr<bool> AgreeOnNccl(store::Store& store,
                                 const std::string& key_prefix, int rank,
                                 int world_size, bool usable,
                                 absl::Time deadline);

// Creates the NCCL communicator of config.key_prefix: rank 0's unique id
// travels through the store; one CUDA stream per communicator; the device is
// CommOptions::cuda_device, else LOCAL_RANK modulo the device count. Blocks
// (polling NCCL's non-blocking init) until every rank has joined or
// `deadline` (the communicator is then aborted). Errors: FAILED_PRECONDITION
// naming why NCCL cannot run here (no NCCL in this build; the CUDA error, 35
// being "insufficient driver": no driver or no GPU); DEADLINE_EXCEEDED; the
// ncclResult_t of init (nccl_status.h); the store's errors.
absl::StatusOr<std::unique_ptr<Backend>> ConnectNccl(const CoreConfig& config,
                                                     absl::Time deadline);

// The NCCL backend of a communicator formed under the control channel
// (config.round set; not a group): every rank publishes where it was
// (`nccl_previous/<rank>`: "ROUND:RANK:WORLD" of the ended round, or "new"),
// and when this round holds exactly the ended round's survivors in their old
// order, `previous` (this rank's backend of that round, aborted; may be null)
// is taken and shrunk (Backend::Shrink: ncclCommShrink). Otherwise, or where
// the library cannot shrink, ConnectNccl. Blocks as ConnectNccl, plus one
// store exchange. Errors: the store's, Shrink's (but UNIMPLEMENTED),
// ConnectNccl's.
absl::StatusOr<std::unique_ptr<Backend>> ShrinkOrConnectNccl(
    const CoreConfig& config, std::unique_ptr<Backend>& previous,
    absl::Time deadline);

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_NCCL_NCCL_BACKEND_H_
