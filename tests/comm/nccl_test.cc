// The NCCL backend. Without a GPU (this project's CI) it must build, refuse
// with FAILED_PRECONDITION naming the CUDA error, and let `auto` fall back to
// Gloo; the tests that need a device skip with the reason. With a GPU they run
// collectives on device memory.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/nccl/nccl_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "muster/comm/communicator.h"
#include "muster/store/in_memory_store.h"

#ifdef MUSTER_WITH_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm/nccl/nccl_status.h"
#endif

namespace muster::comm {
namespace {

using ::testing::HasSubstr;

CommOptions Options(Backend backend) {
  CommOptions options;
  options.timeout = absl::Seconds(60);
  options.backend = backend;
  return options;
}

#ifdef MUSTER_WITH_NCCL
TEST(NcclStatusTest, EveryResultHasItsCode) {
  using internal::StatusFromNccl;
  EXPECT_TRUE(StatusFromNccl(ncclSuccess, "x").ok());
  EXPECT_EQ(StatusFromNccl(ncclUnhandledCudaError, "x").code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(StatusFromNccl(ncclSystemError, "x").code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(StatusFromNccl(ncclInternalError, "x").code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(StatusFromNccl(ncclInvalidArgument, "x").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StatusFromNccl(ncclInvalidUsage, "x").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(StatusFromNccl(ncclRemoteError, "x").code(),
            absl::StatusCode::kAborted);
  absl::Status s = StatusFromNccl(ncclRemoteError, "rank 0/2: AllReduce");
  EXPECT_THAT(s.message(), HasSubstr("rank 0/2: AllReduce: NCCL error 6 ("));
}

TEST(NcclStatusTest, NoDriverIsAFailedPreconditionNamingError35) {
  absl::Status s = internal::StatusFromCuda(cudaErrorInsufficientDriver,
                                            "cudaGetDeviceCount");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(),
              HasSubstr("CUDA error 35 (cudaErrorInsufficientDriver"));
  EXPECT_THAT(s.message(), HasSubstr("no NVIDIA driver"));
  EXPECT_EQ(internal::StatusFromCuda(cudaErrorNoDevice, "x").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(internal::StatusFromCuda(cudaErrorMemoryAllocation, "x").code(),
            absl::StatusCode::kInternal);
}
#endif

TEST(NcclBackendTest, WithoutAGpuAskingForNcclIsAFailedPreconditionNamingWhy) {
  std::string why;
  if (internal::NcclUsable(&why)) {
    GTEST_SKIP() << "a GPU is present here: the refusal path does not apply";
  }
  auto comm = Communicator::Create(std::make_shared<store::InMemoryStore>(), 0,
                                   1, Options(Backend::kNccl));
  ASSERT_EQ(comm.status().code(), absl::StatusCode::kFailedPrecondition)
      << comm.status();
  EXPECT_THAT(comm.status().message(), HasSubstr("NCCL backend cannot run"));
#ifdef MUSTER_WITH_NCCL
  // This machine: the CUDA runtime finds no driver (error 35) or no device.
  EXPECT_THAT(comm.status().message(), HasSubstr("cudaGetDeviceCount"));
  EXPECT_THAT(comm.status().message(), HasSubstr("no usable GPU"));
#else
  EXPECT_THAT(comm.status().message(), HasSubstr("has no NCCL"));
#endif
  std::cout << "NCCL refused as expected: " << comm.status() << std::endl;
}

TEST(NcclBackendTest, AutoFallsBackToGlooWhereNcclCannotRun) {
  std::string why;
  if (internal::NcclUsable(&why)) {
    GTEST_SKIP() << "a GPU is present here: auto uses NCCL for device memory";
  }
  auto store = std::make_shared<store::InMemoryStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto comm = Communicator::Create(store, r, 2, Options(Backend::kAuto));
      ASSERT_TRUE(comm.ok()) << comm.status();
      EXPECT_EQ((*comm)->backend_name(), "gloo");
      float x = 1;
      ASSERT_TRUE(
          (*comm)->AllReduce(&x, 1, DataType::kFloat32, ReduceOp::kSum).ok());
      EXPECT_EQ(x, 2);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(NcclBackendTest, DeviceMemoryCollectives) {
  std::string why;
  if (!internal::NcclUsable(&why)) {
    GTEST_SKIP() << "NCCL tests need a GPU; skipped here: " << why;
  }
#ifdef MUSTER_WITH_NCCL
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  // One rank per device (NCCL refuses two ranks on one device).
  const int n = std::min(devices, 4);
  auto store = std::make_shared<store::InMemoryStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      CommOptions options = Options(Backend::kAuto);
      options.cuda_device = r;
      auto comm = Communicator::Create(store, r, n, options);
      ASSERT_TRUE(comm.ok()) << comm.status();
      ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
      constexpr size_t kCount = 1 << 20;
      std::vector<float> host(kCount, static_cast<float>(r + 1));
      float* dev = nullptr;
      ASSERT_EQ(cudaMalloc(&dev, kCount * sizeof(float)), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dev, host.data(), kCount * sizeof(float),
                           cudaMemcpyHostToDevice),
                cudaSuccess);
      // Device memory goes to NCCL, host memory to Gloo, on one communicator.
      ASSERT_TRUE(
          (*comm)
              ->AllReduce(dev, kCount, DataType::kFloat32, ReduceOp::kSum)
              .ok());
      ASSERT_EQ(cudaMemcpy(host.data(), dev, kCount * sizeof(float),
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
      EXPECT_EQ(host[0], static_cast<float>(n * (n + 1) / 2));
      EXPECT_EQ(host[kCount - 1], static_cast<float>(n * (n + 1) / 2));
      float* gathered = nullptr;
      ASSERT_EQ(cudaMalloc(&gathered, n * sizeof(float)), cudaSuccess);
      ASSERT_TRUE(
          (*comm)->AllGather(dev, gathered, 1, DataType::kFloat32).ok());
      ASSERT_TRUE((*comm)->Barrier().ok());
      int32_t h = r;
      ASSERT_TRUE(
          (*comm)->AllReduce(&h, 1, DataType::kInt32, ReduceOp::kMax).ok());
      EXPECT_EQ(h, n - 1);
      cudaFree(gathered);
      cudaFree(dev);
    });
  }
  for (auto& t : threads) t.join();
#endif
}

}  // namespace
}  // namespace muster::comm
