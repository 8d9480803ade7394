// --numa-binding: which CPUs each local rank's worker may run on, from the
// machine's topology, with torchrun's modes (torch.numa.binding):
//
//   node          the CPUs of the NUMA node of the worker's GPU
//   socket        the CPUs of every NUMA node in that node's socket
//   exclusive     an equal share of that node's physical cores, not shared
//                 with the other local ranks whose GPUs are on the node
//   core-complex  one L3 cache domain of that node (ranks on the node take
//                 the domains in turn)
//
// As torchrun, local rank k uses the k-th visible GPU (CUDA_VISIBLE_DEVICES
// applied). The topology is read from sysfs (no libnuma or numactl needed: the
// kernel publishes everything libnuma reads), and the binding is a CPU
// affinity set in the worker before exec, so memory is then allocated on the
// local node by the kernel's first-touch policy. A machine without GPUs or
// NUMA information gets no binding and one warning saying why.
#ifndef MUSTER_AGENT_SRC_NUMA_BINDING_H_
#define MUSTER_AGENT_SRC_NUMA_BINDING_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace muster::agent {

// What the binding needs to know about the machine.
struct NumaTopology {
  // NUMA node of each visible GPU in CUDA order (-1: unknown).
  std::vector<int> gpu_nodes;
  // CPUs of each NUMA node.
  std::map<int, std::set<int>> node_cpus;
  // Per CPU: its socket (physical_package_id), its physical core (an id
  // unique on the machine) and its L3 domain (the lowest CPU sharing its L3).
  std::map<int, int> cpu_socket;
  std::map<int, int> cpu_core;
  std::map<int, int> cpu_l3;
  // CPUs this process may use (sched_getaffinity); bindings stay inside.
  std::set<int> allowed;
  // Why gpu_nodes is empty, for the warning ("no NVIDIA GPU in
  // /proc/driver/nvidia/gpus").
  std::string gpu_note;
};

// Reads the topology under `root` ("" for the real machine; tests pass a
// directory laid out like / with proc/driver/nvidia/gpus/<bus id>/,
// sys/bus/pci/devices/<bus id>/numa_node, sys/devices/system/node/node<N>/
// cpulist and sys/devices/system/cpu/cpu<C>/{topology,cache/index3}/...).
// CUDA_VISIBLE_DEVICES from `env` selects and orders the GPUs (indices only;
// UUIDs leave them unmapped). `allowed` empty: this process's affinity.
NumaTopology ReadNumaTopology(const std::string& root,
                              const std::map<std::string, std::string>& env,
                              std::set<int> allowed = {});

// The CPUs of each local rank 0..nproc-1 under `mode`. An empty result means
// no binding at all; FAILED_PRECONDITION carries the warning (no GPU, no NUMA
// node for a GPU, fewer GPUs than workers, fewer cores than exclusive ranks).
// Pure; thread-compatible.
absl::StatusOr<std::vector<std::vector<int>>> ComputeNumaBinding(
    const std::string& mode, int nproc, const NumaTopology& topology);

// "0-3,8,10-11" <-> {0,1,2,3,8,10,11}. Parse returns nullopt-like empty set
// on garbage.
std::set<int> ParseCpuList(const std::string& text);
std::string FormatCpuList(const std::vector<int>& cpus);

}  // namespace muster::agent

#endif  // MUSTER_AGENT_SRC_NUMA_BINDING_H_
