#include "doctor/src/gpu_facts.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "muster/platform/dynamic_library.h"
#include "muster/platform/files.h"

namespace muster::doctor::internal {
namespace {

CudaFacts ProbeCuda(absl::Duration timeout) {
  struct Shared {
    absl::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
    CudaFacts facts ABSL_GUARDED_BY(mu);
  };
  auto shared = std::make_shared<Shared>();
  std::thread([shared] {
    CudaFacts f;
    absl::StatusOr<platform::DynamicLibrary> dl =
        platform::DynamicLibrary::Load("libcuda.so.1");
    if (!dl.ok()) {
      f.error = std::string(dl.status().message());
    } else {
      f.loaded = true;
      using IntFn = int (*)(int*);
      using InitFn = int (*)(unsigned int);
      using NameFn = int (*)(char*, int, int);
      using ErrFn = int (*)(int, const char**);
      auto version = dl->Function<IntFn>("cuDriverGetVersion");
      auto init = dl->Function<InitFn>("cuInit");
      auto count = dl->Function<IntFn>("cuDeviceGetCount");
      auto name = dl->Function<NameFn>("cuDeviceGetName");
      auto err_name = dl->Function<ErrFn>("cuGetErrorName");
      f.path = platform::LibraryPathOf(reinterpret_cast<void*>(init));
      if (version != nullptr) version(&f.driver_version);
      if (init != nullptr) {
        f.init_rc = init(0);
        if (f.init_rc != 0 && err_name != nullptr) {
          const char* s = nullptr;
          if (err_name(f.init_rc, &s) == 0 && s != nullptr) f.init_error = s;
        }
        if (f.init_rc == 0 && count != nullptr) {
          count(&f.devices);
          for (int i = 0; i < f.devices && name != nullptr; ++i) {
            char buf[256] = {0};
            if (name(buf, sizeof(buf) - 1, i) == 0) f.names.push_back(buf);
          }
        }
      }
    }
    absl::MutexLock l(&shared->mu);
    shared->facts = f;
    shared->done = true;
  }).detach();
  absl::MutexLock l(&shared->mu);
  if (!shared->mu.AwaitWithTimeout(absl::Condition(&shared->done), timeout)) {
    CudaFacts f;
    f.timed_out = true;
    return f;
  }
  return shared->facts;
}

std::string NcclVersionText(int code) {
  int major, minor, patch;
  if (code >= 10000) {
    major = code / 10000;
    minor = (code % 10000) / 100;
    patch = code % 100;
  } else {
    major = code / 1000;
    minor = (code % 1000) / 100;
    patch = code % 100;
  }
  return absl::StrCat(major, ".", minor, ".", patch);
}

}  // namespace

GpuFacts CollectGpuFacts(absl::Duration cuda_timeout) {
  GpuFacts g;
  {
    std::ifstream f("/proc/driver/nvidia/version");
    std::string line;
    if (std::getline(f, line)) {
      g.kernel_module = std::string(absl::StripAsciiWhitespace(line));
    }
  }
  std::error_code ec;
  g.nvidiactl = std::filesystem::exists("/dev/nvidiactl", ec);
  for (const std::string& name : platform::ListDirectory("/dev")) {
    absl::string_view n = name;
    int idx = 0;
    if (absl::ConsumePrefix(&n, "nvidia") && absl::SimpleAtoi(n, &idx)) {
      ++g.device_nodes;
    }
  }
  g.cuda = ProbeCuda(cuda_timeout);
  absl::StatusOr<platform::DynamicLibrary> dl =
      platform::DynamicLibrary::Load("libnccl.so.2");
  if (!dl.ok()) {
    g.nccl_error = std::string(dl.status().message());
  } else {
    g.nccl_loaded = true;
    using VerFn = int (*)(int*);
    auto ver = dl->Function<VerFn>("ncclGetVersion");
    int code = 0;
    if (ver != nullptr && ver(&code) == 0)
      g.nccl_version = NcclVersionText(code);
    g.nccl_path = platform::LibraryPathOf(reinterpret_cast<void*>(ver));
  }
  return g;
}

}  // namespace muster::doctor::internal
