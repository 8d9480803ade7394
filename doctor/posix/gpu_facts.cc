#include "doctor/posix/gpu_facts.h"

#include <dirent.h>
#include <dlfcn.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"

namespace muster::doctor::posix {
namespace {

struct Dl {
  explicit Dl(const char* name) : h(dlopen(name, RTLD_NOW | RTLD_LOCAL)) {
    if (h == nullptr) {
      const char* e = dlerror();
      error = e != nullptr ? e : "not found";
    }
  }
  ~Dl() {
    // libcuda and libnccl are left loaded: unloading a driver library that
    // started threads is unsafe, and the process exits soon.
  }
  void* h = nullptr;
  std::string error;
  template <typename F>
  F Sym(const char* name) {
    return h == nullptr ? nullptr : reinterpret_cast<F>(dlsym(h, name));
  }
};

std::string DlPath(void* sym) {
  Dl_info info;
  if (sym != nullptr && dladdr(sym, &info) != 0 && info.dli_fname != nullptr) {
    return info.dli_fname;
  }
  return "";
}

CudaFacts ProbeCuda(absl::Duration timeout) {
  struct Shared {
    absl::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
    CudaFacts facts ABSL_GUARDED_BY(mu);
  };
  auto shared = std::make_shared<Shared>();
  std::thread([shared] {
    CudaFacts f;
    auto* dl = new Dl("libcuda.so.1");  // never unloaded, see ~Dl
    if (dl->h == nullptr) {
      f.error = dl->error;
    } else {
      f.loaded = true;
      using IntFn = int (*)(int*);
      using InitFn = int (*)(unsigned int);
      using NameFn = int (*)(char*, int, int);
      using ErrFn = int (*)(int, const char**);
      auto version = dl->Sym<IntFn>("cuDriverGetVersion");
      auto init = dl->Sym<InitFn>("cuInit");
      auto count = dl->Sym<IntFn>("cuDeviceGetCount");
      auto name = dl->Sym<NameFn>("cuDeviceGetName");
      auto err_name = dl->Sym<ErrFn>("cuGetErrorName");
      f.path = DlPath(reinterpret_cast<void*>(init));
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
  g.nvidiactl = access("/dev/nvidiactl", F_OK) == 0;
  if (DIR* d = opendir("/dev")) {
    while (dirent* e = readdir(d)) {
      absl::string_view n = e->d_name;
      int idx = 0;
      if (absl::ConsumePrefix(&n, "nvidia") && absl::SimpleAtoi(n, &idx)) {
        ++g.device_nodes;
      }
    }
    closedir(d);
  }
  g.cuda = ProbeCuda(cuda_timeout);
  auto* dl = new Dl("libnccl.so.2");  // never unloaded, see ~Dl
  if (dl->h == nullptr) {
    g.nccl_error = dl->error;
  } else {
    g.nccl_loaded = true;
    using VerFn = int (*)(int*);
    auto ver = dl->Sym<VerFn>("ncclGetVersion");
    int code = 0;
    if (ver != nullptr && ver(&code) == 0)
      g.nccl_version = NcclVersionText(code);
    g.nccl_path = DlPath(reinterpret_cast<void*>(ver));
  }
  return g;
}

}  // namespace muster::doctor::posix
