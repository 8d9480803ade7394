#include "muster/doctor/node_checks.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace muster::doctor {
namespace {

std::string Gib(int64_t bytes) {
  return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / (1 << 30));
}

}  // namespace

Check DiskSpaceCheck(const NodeOptions& options, const NodeFacts& facts) {
  Check c;
  c.id = "node-disk";
  const std::string dir = options.log_dir.empty() ? "." : options.log_dir;
  c.title = absl::StrCat("free space in the log directory ", dir);
  c.data = {{"log_dir", dir},
            {"free_bytes", facts.free_bytes},
            {"min_free_bytes", options.min_free_bytes}};
  if (facts.free_bytes < 0) {
    c.status = Status::kFail;
    c.summary = absl::StrCat("cannot read the free space of ", dir, ": ",
                             facts.space_error);
    c.fix.push_back(
        "Create the directory, or point --log-dir at one that "
        "exists and is writable.");
    return c;
  }
  c.evidence.push_back(absl::StrCat(Gib(facts.free_bytes), " free, ",
                                    Gib(options.min_free_bytes), " needed"));
  if (facts.free_bytes < options.min_free_bytes) {
    c.status = Status::kFail;
    c.summary = absl::StrCat("only ", Gib(facts.free_bytes), " free in ", dir,
                             " (at least ", Gib(options.min_free_bytes),
                             " wanted): logs and checkpoints would fail");
    c.fix.push_back("Free space there, or choose another --log-dir.");
    return c;
  }
  c.status = Status::kPass;
  c.summary = absl::StrCat(Gib(facts.free_bytes), " free in ", dir);
  return c;
}

Check GpusVisibleCheck(const NodeOptions& options, const GpuFacts& gpu) {
  Check c;
  c.id = "node-gpus";
  c.title = "GPUs visible to this node's workers";
  const int visible = gpu.cuda.init_rc == 0 ? gpu.cuda.devices : 0;
  c.data = {{"visible", visible}, {"nproc_per_node", options.nproc_per_node}};
  std::string why;
  if (!gpu.not_read.empty()) {
    why = gpu.not_read;
  } else if (!gpu.cuda.loaded) {
    why = absl::StrCat("no CUDA driver (", gpu.cuda.error, ")");
  } else if (gpu.cuda.init_rc != 0) {
    why = absl::StrCat("the CUDA driver failed to start: cuInit returned ",
                       gpu.cuda.init_rc, " ", gpu.cuda.init_error,
                       gpu.cuda.init_rc == 35 || gpu.cuda.init_rc == 100
                           ? " (no GPU, or a driver older than the CUDA "
                             "library)"
                           : "");
  }
  c.evidence.push_back(
      why.empty()
          ? absl::StrCat(visible, " GPU", visible == 1 ? "" : "s", " visible")
          : why);
  int wanted = 0;
  const bool per_gpu = options.nproc_per_node == "gpu";
  if (!per_gpu && !absl::SimpleAtoi(options.nproc_per_node, &wanted))
    wanted = 0;
  if (per_gpu && visible == 0) {
    c.status = Status::kFail;
    c.summary = absl::StrCat(
        "--nproc-per-node=gpu, but no GPU is visible on this node: ",
        why.empty() ? "the driver sees none" : why);
    c.fix.push_back(
        "Check `nvidia-smi`, the driver and CUDA_VISIBLE_DEVICES; "
        "or give a number of workers.");
    return c;
  }
  if (!per_gpu && visible > 0 && wanted > visible) {
    c.status = Status::kFail;
    c.summary = absl::StrCat("--nproc-per-node=", wanted, " but only ", visible,
                             " GPU", visible == 1 ? " is" : "s are",
                             " visible: a GPU may be lost");
    c.fix.push_back(
        "Check `nvidia-smi` for a fallen-off GPU (Xid errors in "
        "the kernel log), or lower --nproc-per-node.");
    return c;
  }
  if (!per_gpu && visible == 0) {
    c.status = Status::kInfo;
    c.summary =
        absl::StrCat("no GPU asked for (--nproc-per-node=",
                     options.nproc_per_node.empty() ? std::string("not given")
                                                    : options.nproc_per_node,
                     ") and none visible");
    return c;
  }
  c.status = Status::kPass;
  c.summary =
      absl::StrCat(visible, " GPU", visible == 1 ? "" : "s", " visible");
  return c;
}

Check AdvertisedInterfaceCheck(const NodeOptions& options,
                               const std::vector<InterfaceAddress>& ifaces) {
  Check c;
  c.id = "node-interface";
  c.title = "the advertised interface";
  if (options.advertised_address.empty()) {
    c.status = Status::kInfo;
    c.summary = "no --local-addr given: nothing to check";
    return c;
  }
  c.title = absl::StrCat("the interface of ", options.advertised_address);
  for (const InterfaceAddress& i : ifaces) {
    if (i.address != options.advertised_address) continue;
    c.data = {{"interface", i.name}, {"up", i.up}, {"running", i.running}};
    c.evidence.push_back(
        absl::StrCat(i.name, ": ", i.up ? "up" : "down",
                     i.running ? ", carrier" : ", no carrier"));
    if (!i.up || !i.running) {
      c.status = Status::kFail;
      c.summary =
          absl::StrCat(options.advertised_address, " is on ", i.name,
                       ", which is ", !i.up ? "down" : "without carrier");
      c.fix.push_back(
          "Bring the interface up (check the cable or the NIC), "
          "or advertise another address.");
      c.commands.push_back(absl::StrCat("ip link set ", i.name, " up"));
      return c;
    }
    c.status = Status::kPass;
    c.summary = absl::StrCat(options.advertised_address, " is on ", i.name,
                             ", up and running");
    return c;
  }
  c.status = Status::kFail;
  c.summary = absl::StrCat("no interface of this node has the address ",
                           options.advertised_address);
  c.fix.push_back(
      "Advertise one of this node's addresses (--local-addr), or "
      "bring its interface back.");
  return c;
}

Report DiagnoseNode(const NodeOptions& options, const NodeFacts& facts,
                    const std::string& hostname, const std::string& os) {
  Report report;
  report.hostname = hostname;
  report.os = os;
  report.checks.push_back(DiskSpaceCheck(options, facts));
  report.checks.push_back(GpusVisibleCheck(options, facts.gpu));
  report.checks.push_back(AdvertisedInterfaceCheck(options, facts.interfaces));
  return report;
}

}  // namespace muster::doctor
