// muster-nccl-bench: GPU allreduce bus bandwidth, libmuster_comm's NCCL
// backend against raw ncclAllReduce, in one run (nccl-tests' conventions).
//
//   muster --standalone --nproc-per-node=NGPUS --no-python
//       build/bin/muster-nccl-bench [MIN_BYTES] [MAX_BYTES] [ITERS]
//
// Defaults: 1 KB .. 256 MB, x2, 20 timed iterations after 5 warm-ups per
// size and implementation. Each rank uses GPU LOCAL_RANK % device count.
// Every operation is an in-place float32 sum on device memory; the time is
// the slowest rank's mean (cudaDeviceSynchronize after the iterations);
// busbw = size / time x 2 (n - 1) / n (0 on one rank, as nccl-tests prints).
// Raw NCCL gets its own communicator, its unique id through the launcher's
// store (MUSTER_STORE_ENDPOINT/PREFIX), as muster's backend does.
// Built only with NCCL (bench/CMakeLists.txt); scripts/gpu-check.sh runs it.

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "muster/comm/communicator.h"
#include "muster/platform/env.h"
#include "muster/store/grpc_store.h"

namespace {

using muster::comm::Communicator;
using muster::comm::DataType;
using muster::comm::ReduceOp;

// Ends the run with a message naming the failed call.
void Check(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "muster-nccl-bench: %s failed\n", what.c_str());
  std::exit(1);
}

// Raw NCCL's communicator: rank 0's unique id through the store.
ncclComm_t RawNccl(int rank, int n) {
  muster::store::GrpcStoreOptions so;
  so.endpoint = muster::platform::GetEnv("MUSTER_STORE_ENDPOINT").value_or("");
  so.prefix = muster::platform::GetEnv("MUSTER_STORE_PREFIX").value_or("");
  auto store = muster::store::NewGrpcStore(so);
  Check(store.ok(), "connecting to the store");
  ncclUniqueId id;
  const std::string key = "muster-nccl-bench/raw_id";
  if (rank == 0) {
    Check(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    Check((*store)
              ->Set(key, std::string(reinterpret_cast<char*>(&id), sizeof id))
              .ok(),
          "publishing the unique id");
  } else {
    auto got = (*store)->Get(key, absl::Seconds(60));
    Check(got.ok() && got->size() == sizeof id, "reading the unique id");
    std::copy(got->begin(), got->end(), reinterpret_cast<char*>(&id));
  }
  ncclComm_t comm;
  Check(ncclCommInitRank(&comm, n, id, rank) == ncclSuccess,
        "ncclCommInitRank");
  return comm;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t min_bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : 1024;
  const size_t max_bytes =
      argc > 2 ? std::strtoull(argv[2], nullptr, 0) : (256u << 20);
  const int iters = argc > 3 ? std::atoi(argv[3]) : 20;
  int devices = 0;
  Check(cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0,
        "finding a CUDA device");
  const char* local = muster::platform::NonEmptyEnv("LOCAL_RANK");
  Check(cudaSetDevice((local ? std::atoi(local) : 0) % devices) == cudaSuccess,
        "cudaSetDevice");
  auto created = Communicator::FromEnvironment();
  Check(created.ok(), "Communicator::FromEnvironment");
  std::unique_ptr<Communicator> comm = std::move(*created);
  const int rank = comm->rank();
  const int n = comm->world_size();
  ncclComm_t raw = RawNccl(rank, n);
  cudaStream_t stream;
  Check(cudaStreamCreate(&stream) == cudaSuccess, "cudaStreamCreate");
  float* data = nullptr;
  Check(cudaMalloc(&data, max_bytes) == cudaSuccess, "cudaMalloc");
  Check(cudaMemset(data, 0, max_bytes) == cudaSuccess, "cudaMemset");
  const double factor = 2.0 * (n - 1) / n;
  if (rank == 0) {
    std::printf("# muster-nccl-bench allreduce float32 sum, %d ranks\n", n);
    std::printf("#%12s %14s %10s %14s %10s %8s\n", "size(B)", "muster(us)",
                "busbw", "nccl(us)", "busbw", "ratio");
  }
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    const size_t count = bytes / sizeof(float);
    double us[2];
    for (int impl = 0; impl < 2; ++impl) {
      auto once = [&] {
        if (impl == 0) {
          Check(comm->AllReduce(data, count, DataType::kFloat32, ReduceOp::kSum)
                    .ok(),
                "muster AllReduce");
        } else {
          Check(ncclAllReduce(data, data, count, ncclFloat, ncclSum, raw,
                              stream) == ncclSuccess,
                "ncclAllReduce");
        }
      };
      for (int i = 0; i < 5; ++i) once();
      Check(cudaDeviceSynchronize() == cudaSuccess, "cudaDeviceSynchronize");
      Check(comm->Barrier().ok(), "Barrier");
      const absl::Time t0 = absl::Now();
      for (int i = 0; i < iters; ++i) once();
      Check(cudaDeviceSynchronize() == cudaSuccess, "cudaDeviceSynchronize");
      double per_op = absl::ToDoubleSeconds(absl::Now() - t0) / iters;
      Check(
          comm->AllReduce(&per_op, 1, DataType::kFloat64, ReduceOp::kMax).ok(),
          "AllReduce of the times");
      us[impl] = per_op * 1e6;
    }
    if (rank == 0) {
      std::printf(" %12zu %14.2f %10.2f %14.2f %10.2f %7.2fx\n", bytes, us[0],
                  bytes / us[0] / 1e3 * factor, us[1],
                  bytes / us[1] / 1e3 * factor, us[0] / us[1]);
      std::fflush(stdout);
    }
  }
  cudaFree(data);
  ncclCommDestroy(raw);
  comm->Shutdown();
  return 0;
}
