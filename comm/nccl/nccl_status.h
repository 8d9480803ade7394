// The one adapter from ncclResult_t (and the CUDA runtime's cudaError_t, which
// NCCL's callers meet on the way) to absl::Status. Every NCCL and CUDA call of
// libmuster_comm goes through it.
//
//   ncclSuccess             OK
//   ncclUnhandledCudaError  INTERNAL (a CUDA call inside NCCL failed)
//   ncclSystemError         UNAVAILABLE (a system call or socket failed:
//                           the network, or a peer that went away)
//   ncclInternalError       INTERNAL
//   ncclInvalidArgument     INVALID_ARGUMENT
//   ncclInvalidUsage        FAILED_PRECONDITION (the calls do not match
//                           between ranks, or a wrong device)
//   ncclRemoteError         ABORTED (a remote peer failed)
//   ncclInProgress          UNAVAILABLE (still in progress where the caller
//                           needed it done)
// The message is "<what>: <ncclGetErrorString>" plus NCCL's last error text
// for the communicator when it has one.
//
//   cudaErrorInsufficientDriver (35), cudaErrorNoDevice (100)
//                           FAILED_PRECONDITION: no NVIDIA driver, or no GPU
//   other CUDA errors       INTERNAL
// The message names the numeric code and cudaGetErrorName.
#ifndef MUSTER_COMM_NCCL_NCCL_STATUS_H_
#define MUSTER_COMM_NCCL_NCCL_STATUS_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace muster::comm::internal {

absl::Status StatusFromNccl(ncclResult_t result, absl::string_view what,
                            ncclComm_t comm = nullptr);

absl::Status StatusFromCuda(cudaError_t error, absl::string_view what);

}  // namespace muster::comm::internal

#endif  // MUSTER_COMM_NCCL_NCCL_STATUS_H_
