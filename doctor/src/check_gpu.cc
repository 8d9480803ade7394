// CUDA driver, GPUs and NCCL.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "doctor/src/util.h"
#include "muster/doctor/checks.h"

namespace muster::doctor {
namespace {

using internal::Find;

}  // namespace

Check GpuCheck(const GpuFacts& gpu,
               const std::map<std::string, std::string>& env) {
  Check c;
  c.id = "gpu";
  c.title = "CUDA driver, GPUs, NCCL";
  if (!gpu.not_read.empty()) {
    c.status = Status::kInfo;
    c.summary = absl::StrCat("not checked: ", gpu.not_read);
    return c;
  }
  const std::string& module_version = gpu.kernel_module;
  if (!module_version.empty()) {
    c.evidence.push_back(
        absl::StrCat("/proc/driver/nvidia/version: ", module_version));
  } else {
    c.evidence.push_back(
        "/proc/driver/nvidia/version: absent (no NVIDIA kernel module)");
  }
  const int dev_nodes = gpu.device_nodes;
  c.evidence.push_back(absl::StrCat(
      "/dev/nvidia[0-9]*: ", dev_nodes,
      gpu.nvidiactl ? ", /dev/nvidiactl present" : ", no /dev/nvidiactl"));
  const CudaFacts& cuda = gpu.cuda;
  if (cuda.timed_out) {
    c.evidence.push_back("libcuda.so.1: cuInit did not return in 20 s");
  } else if (!cuda.loaded) {
    c.evidence.push_back(absl::StrCat("libcuda.so.1: ", cuda.error));
  } else {
    c.evidence.push_back(absl::StrCat(
        "libcuda.so.1: ", cuda.path, ", driver API ",
        cuda.driver_version / 1000, ".", (cuda.driver_version % 1000) / 10,
        ", cuInit: ",
        cuda.init_rc == 0 ? "ok"
                          : absl::StrCat(cuda.init_rc, " ", cuda.init_error),
        cuda.init_rc == 0 ? absl::StrCat(", ", cuda.devices, " GPU(s)") : ""));
    for (size_t i = 0; i < cuda.names.size(); ++i) {
      c.evidence.push_back(absl::StrCat("GPU ", i, ": ", cuda.names[i]));
    }
  }
  const std::string& nccl_version = gpu.nccl_version;
  const std::string& nccl_path = gpu.nccl_path;
  if (!gpu.nccl_loaded) {
    c.evidence.push_back(absl::StrCat("libnccl.so.2: ", gpu.nccl_error));
  } else {
    c.evidence.push_back(
        absl::StrCat("libnccl.so.2: ", nccl_path, ", NCCL ",
                     nccl_version.empty() ? "?" : nccl_version));
  }
  const std::string* visible = Find(env, "CUDA_VISIBLE_DEVICES");
  if (visible != nullptr) {
    c.evidence.push_back(absl::StrCat("CUDA_VISIBLE_DEVICES='", *visible, "'"));
  }
  c.data = {{"kernel_module", module_version},
            {"device_nodes", dev_nodes},
            {"libcuda", cuda.loaded ? cuda.path : ""},
            {"driver_api_version", cuda.driver_version},
            {"cuinit", cuda.init_rc},
            {"cuinit_error", cuda.init_error},
            {"gpus", cuda.devices},
            {"gpu_names", cuda.names},
            {"nccl_version", nccl_version},
            {"nccl_path", nccl_path}};
  const bool has_driver = !module_version.empty() || dev_nodes > 0;
  if (!has_driver && !cuda.loaded) {
    c.status = Status::kInfo;
    c.summary = absl::StrCat(
        "no NVIDIA driver or GPU: CPU training with Gloo",
        nccl_version.empty() ? ""
                             : absl::StrCat(" (NCCL ", nccl_version,
                                            " is installed but needs a GPU)"));
    return c;
  }
  if (cuda.timed_out) {
    c.status = Status::kFail;
    c.summary = "cuInit hangs: the driver is stuck";
    c.fix.push_back(
        "Check `nvidia-smi` and the kernel log (dmesg); a reboot "
        "or driver reload usually clears it.");
    return c;
  }
  if (!cuda.loaded) {
    c.status = Status::kFail;
    c.summary =
        "an NVIDIA kernel module or devices are present but "
        "libcuda.so.1 cannot be loaded";
    c.fix.push_back(
        "Install the user-space driver that matches the kernel module "
        "(libcuda1 / nvidia-driver), or in a container run with the NVIDIA "
        "container toolkit (--gpus all).");
    return c;
  }
  if (cuda.init_rc != 0) {
    c.status = Status::kFail;
    c.summary =
        absl::StrCat("cuInit failed: ", cuda.init_rc, " ", cuda.init_error);
    if (cuda.init_rc == 803 ||
        cuda.init_error == "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH") {
      c.fix.push_back(
          "The user-space libcuda and the kernel module differ in "
          "version: reboot, or reinstall one driver version.");
    } else if (cuda.init_rc == 100) {
      c.fix.push_back(
          "No device is visible: check CUDA_VISIBLE_DEVICES and, in a "
          "container, that the GPUs were passed in (--gpus all).");
    } else {
      c.fix.push_back("Check `nvidia-smi` and dmesg for driver errors.");
    }
    return c;
  }
  if (cuda.devices == 0) {
    c.status = Status::kWarn;
    c.summary = "the driver works but shows no GPU";
    c.fix.push_back("Check CUDA_VISIBLE_DEVICES and the container's devices.");
    return c;
  }
  if (nccl_version.empty()) {
    c.status = Status::kWarn;
    c.summary = absl::StrCat(cuda.devices,
                             " GPU(s), but no libnccl.so.2 for muster's NCCL "
                             "backend");
    c.fix.push_back(
        "Install NCCL (Debian/Ubuntu: libnccl2; PyTorch wheels bring their own "
        "in nvidia-nccl-cu12).");
    return c;
  }
  c.status = Status::kPass;
  c.summary = absl::StrCat(cuda.devices, " GPU(s), NCCL ", nccl_version);
  return c;
}

}  // namespace muster::doctor
