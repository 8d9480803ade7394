#include "comm/nccl/nccl_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace muster::comm::internal {

absl::Status StatusFromNccl(ncclResult_t result, absl::string_view what,
                            ncclComm_t comm) {
  if (result == ncclSuccess) return absl::OkStatus();
  std::string text =
      absl::StrCat(what, ": NCCL error ", static_cast<int>(result), " (",
                   ncclGetErrorString(result), ")");
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') absl::StrAppend(&text, ": ", last);
  }
  switch (result) {
    case ncclSuccess:
      return absl::OkStatus();
    case ncclUnhandledCudaError:
    case ncclInternalError:
      return absl::InternalError(text);
    case ncclSystemError:
      return absl::UnavailableError(text);
    case ncclInvalidArgument:
      return absl::InvalidArgumentError(text);
    case ncclInvalidUsage:
      return absl::FailedPreconditionError(text);
    case ncclRemoteError:
      return absl::AbortedError(text);
    case ncclInProgress:
      return absl::UnavailableError(text);
    default:
      return absl::UnknownError(text);
  }
}

absl::Status StatusFromCuda(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  std::string text = absl::StrCat(
      what, ": CUDA error ", static_cast<int>(error), " (",
      cudaGetErrorName(error), ": ", cudaGetErrorString(error), ")");
  if (error == cudaErrorInsufficientDriver || error == cudaErrorNoDevice) {
    absl::StrAppend(&text,
                    ": no usable GPU (no NVIDIA driver is loaded, or there is "
                    "no device): use the gloo backend, or run on a machine "
                    "with a GPU");
    return absl::FailedPreconditionError(text);
  }
  return absl::InternalError(text);
}

}  // namespace muster::comm::internal
