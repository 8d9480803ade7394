// The NVIDIA kernel module, device nodes, libcuda and libnccl on Linux: files
// read with the standard library, the libraries through
// muster/platform/dynamic_library.h.
#ifndef MUSTER_DOCTOR_SRC_GPU_FACTS_H_
#define MUSTER_DOCTOR_SRC_GPU_FACTS_H_

#include "absl/time/time.h"
#include "muster/doctor/facts.h"

namespace muster::doctor::internal {

// Reads /proc/driver/nvidia/version and /dev, loads libcuda.so.1 (cuInit
// runs on a detached thread: a stuck driver costs at most `cuda_timeout`)
// and libnccl.so.2. The libraries stay loaded.
GpuFacts CollectGpuFacts(absl::Duration cuda_timeout);

}  // namespace muster::doctor::internal

#endif  // MUSTER_DOCTOR_SRC_GPU_FACTS_H_
