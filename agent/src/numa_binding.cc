#include "agent/src/numa_binding.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "muster/platform/env.h"
#include "muster/platform/files.h"

namespace muster::agent {
namespace {

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return std::string(absl::StripAsciiWhitespace(line));
}

int ReadInt(const std::string& path, int fallback) {
  int v = 0;
  return absl::SimpleAtoi(ReadFirstLine(path), &v) ? v : fallback;
}

}  // namespace

std::set<int> ParseCpuList(const std::string& text) {
  std::set<int> out;
  for (absl::string_view item :
       absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::vector<absl::string_view> range = absl::StrSplit(item, '-');
    int lo = 0, hi = 0;
    if (range.size() == 1 && absl::SimpleAtoi(range[0], &lo)) {
      hi = lo;
    } else if (range.size() != 2 || !absl::SimpleAtoi(range[0], &lo) ||
               !absl::SimpleAtoi(range[1], &hi) || hi < lo) {
      return {};
    }
    for (int c = lo; c <= hi; ++c) out.insert(c);
  }
  return out;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    parts.push_back(j == i ? absl::StrCat(cpus[i])
                           : absl::StrCat(cpus[i], "-", cpus[j]));
    i = j + 1;
  }
  return absl::StrJoin(parts, ",");
}

NumaTopology ReadNumaTopology(const std::string& root,
                              const std::map<std::string, std::string>& env,
                              std::set<int> allowed) {
  NumaTopology t;
  // GPUs as the driver lists them (PCI bus ids, in bus order: CUDA's order
  // with CUDA_DEVICE_ORDER=PCI_BUS_ID, and the usual one on servers).
  const std::string gpu_dir = root + "/proc/driver/nvidia/gpus";
  std::vector<std::string> buses = platform::ListDirectory(gpu_dir);
  std::vector<std::string> visible = buses;
  auto cvd = env.find("CUDA_VISIBLE_DEVICES");
  if (!buses.empty() && cvd != env.end()) {
    visible.clear();
    for (absl::string_view item : absl::StrSplit(cvd->second, ',')) {
      int index = -1;
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(item), &index) ||
          index < 0 || index >= static_cast<int>(buses.size())) {
        break;  // as CUDA: the list ends at the first entry it cannot use
      }
      visible.push_back(buses[index]);
    }
    if (visible.empty()) {
      t.gpu_note = absl::StrCat("CUDA_VISIBLE_DEVICES=", cvd->second,
                                " names no GPU by index");
    }
  } else if (buses.empty()) {
    t.gpu_note = absl::StrCat("no NVIDIA GPU in ", gpu_dir);
  }
  for (const std::string& bus : visible) {
    t.gpu_nodes.push_back(
        ReadInt(absl::StrCat(root, "/sys/bus/pci/devices/",
                             absl::AsciiStrToLower(bus), "/numa_node"),
                -1));
  }
  const std::string node_dir = root + "/sys/devices/system/node";
  for (const std::string& name : platform::ListDirectory(node_dir)) {
    int node = 0;
    if (name.rfind("node", 0) != 0 || !absl::SimpleAtoi(name.substr(4), &node))
      continue;
    t.node_cpus[node] = ParseCpuList(
        ReadFirstLine(absl::StrCat(node_dir, "/", name, "/cpulist")));
  }
  const std::string cpu_dir = root + "/sys/devices/system/cpu";
  for (const auto& [node, cpus] : t.node_cpus) {
    for (int cpu : cpus) {
      const std::string base = absl::StrCat(cpu_dir, "/cpu", cpu);
      const int socket = ReadInt(base + "/topology/physical_package_id", node);
      t.cpu_socket[cpu] = socket;
      // core_id is unique within a socket only.
      t.cpu_core[cpu] =
          socket * 65536 + ReadInt(base + "/topology/core_id", cpu);
      std::set<int> l3 =
          ParseCpuList(ReadFirstLine(base + "/cache/index3/shared_cpu_list"));
      t.cpu_l3[cpu] = l3.empty() ? -1 : *l3.begin();
    }
  }
  if (allowed.empty() && root.empty()) {
    for (int c : platform::CurrentCpuAffinity()) allowed.insert(c);
  }
  if (allowed.empty()) {
    for (const auto& [node, cpus] : t.node_cpus)
      allowed.insert(cpus.begin(), cpus.end());
  }
  t.allowed = std::move(allowed);
  return t;
}

absl::StatusOr<std::vector<std::vector<int>>> ComputeNumaBinding(
    const std::string& mode, int nproc, const NumaTopology& t) {
  if (mode.empty()) return std::vector<std::vector<int>>{};
  const std::string flag = absl::StrCat("--numa-binding=", mode);
  if (t.node_cpus.empty()) {
#ifdef _WIN32
    // The topology comes from Linux's /sys; Windows' (GetNumaNode*,
    // processor groups) is not read yet.
    constexpr char kNoNodes[] = "NUMA binding is not implemented on Windows";
#else
    constexpr char kNoNodes[] =
        "this machine shows no NUMA nodes (/sys/devices/system/node)";
#endif
    return absl::FailedPreconditionError(
        absl::StrCat(flag, ": ", kNoNodes, "; workers run without binding"));
  }
  if (t.gpu_nodes.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        flag, ": ", t.gpu_note.empty() ? "no GPU" : t.gpu_note,
        "; the binding places each worker near the GPU of its local rank, so "
        "workers run without binding"));
  }
  if (nproc > static_cast<int>(t.gpu_nodes.size())) {
    return absl::FailedPreconditionError(absl::StrCat(
        flag, ": ", nproc, " workers but ", t.gpu_nodes.size(),
        " visible GPU(s); local rank k is bound near GPU k, so workers run "
        "without binding"));
  }
  for (int k = 0; k < nproc; ++k) {
    if (t.gpu_nodes[k] < 0 || t.node_cpus.count(t.gpu_nodes[k]) == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          flag, ": the kernel names no NUMA node for the GPU of local rank ", k,
          " (numa_node -1, a single-node machine or a VM); workers run "
          "without binding"));
    }
  }
  auto allowed_of = [&t](const std::set<int>& cpus) {
    std::vector<int> out;
    for (int c : cpus) {
      if (t.allowed.count(c) > 0) out.push_back(c);
    }
    return out;
  };
  // Local ranks per NUMA node, in rank order.
  std::map<int, std::vector<int>> ranks_on_node;
  for (int k = 0; k < nproc; ++k) ranks_on_node[t.gpu_nodes[k]].push_back(k);
  auto index_on_node = [&](int k) {
    const std::vector<int>& r = ranks_on_node[t.gpu_nodes[k]];
    return static_cast<int>(std::find(r.begin(), r.end(), k) - r.begin());
  };

  std::vector<std::vector<int>> out(nproc);
  for (int k = 0; k < nproc; ++k) {
    const int node = t.gpu_nodes[k];
    const std::set<int>& node_cpus = t.node_cpus.at(node);
    std::vector<int> cpus;
    if (mode == "node") {
      cpus = allowed_of(node_cpus);
    } else if (mode == "socket") {
      std::set<int> sockets, in_socket;
      for (int c : node_cpus)
        sockets.insert(t.cpu_socket.count(c) ? t.cpu_socket.at(c) : node);
      for (const auto& [n, all] : t.node_cpus) {
        for (int c : all) {
          const int s = t.cpu_socket.count(c) ? t.cpu_socket.at(c) : n;
          if (sockets.count(s) > 0) in_socket.insert(c);
        }
      }
      cpus = allowed_of(in_socket);
    } else if (mode == "exclusive") {
      // Whole physical cores (hyperthread siblings stay together), split as
      // evenly as possible, the first ranks taking one more.
      std::map<int, std::vector<int>> cores;
      for (int c : allowed_of(node_cpus)) {
        cores[t.cpu_core.count(c) ? t.cpu_core.at(c) : c].push_back(c);
      }
      const int sharers = static_cast<int>(ranks_on_node[node].size());
      const int n = static_cast<int>(cores.size());
      if (n < sharers) {
        return absl::FailedPreconditionError(absl::StrCat(
            flag, ": NUMA node ", node, " has ", n, " usable cores for ",
            sharers, " workers; workers run without binding"));
      }
      const int i = index_on_node(k);
      const int base = n / sharers, extra = n % sharers;
      const int first = i * base + std::min(i, extra);
      const int count = base + (i < extra ? 1 : 0);
      auto it = cores.begin();
      std::advance(it, first);
      for (int j = 0; j < count; ++j, ++it) {
        cpus.insert(cpus.end(), it->second.begin(), it->second.end());
      }
      std::sort(cpus.begin(), cpus.end());
    } else if (mode == "core-complex") {
      std::map<int, std::vector<int>> domains;
      for (int c : allowed_of(node_cpus)) {
        domains[t.cpu_l3.count(c) ? t.cpu_l3.at(c) : -1].push_back(c);
      }
      if (domains.empty()) {
        return absl::FailedPreconditionError(
            absl::StrCat(flag, ": NUMA node ", node,
                         " has no usable CPUs; workers run without binding"));
      }
      auto it = domains.begin();
      std::advance(it, index_on_node(k) % static_cast<int>(domains.size()));
      cpus = it->second;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": expected node, socket, exclusive or core-complex"));
    }
    if (cpus.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          flag, ": none of the CPUs near the GPU of local rank ", k,
          " may be used by this process (taskset/cpuset); workers run without "
          "binding"));
    }
    out[k] = std::move(cpus);
  }
  return out;
}

}  // namespace muster::agent
