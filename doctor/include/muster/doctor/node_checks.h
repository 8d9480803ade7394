// `muster doctor --node`: is this node fit to take part in a round? Built-in
// checks over facts the doctor's collector already gathers (interfaces, GPUs)
// and the log directory's free space: the same checks a `--health-check`
// would run (`--health-check='muster doctor --node ...'`), pure functions
// from facts to findings like the other checks.
#ifndef MUSTER_DOCTOR_NODE_CHECKS_H_
#define MUSTER_DOCTOR_NODE_CHECKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "muster/doctor/facts.h"
#include "muster/doctor/report.h"

namespace muster::doctor {

struct NodeOptions {
  std::string log_dir;  // where the job writes its logs ("": the cwd)
  int64_t min_free_bytes = int64_t{1} << 30;  // --min-free (1 GiB)
  std::string nproc_per_node;                 // "gpu", a number, or ""
  std::string advertised_address;             // --local-addr; "": none
};

struct NodeFacts {
  int64_t free_bytes = -1;  // -1: could not be read (space_error says why)
  std::string space_error;
  GpuFacts gpu;
  std::vector<InterfaceAddress> interfaces;
};

// Free space in the log directory: FAIL below min_free_bytes or unreadable.
Check DiskSpaceCheck(const NodeOptions& options, const NodeFacts& facts);
// --nproc-per-node=gpu needs at least one visible GPU (FAIL without; a
// number needs that many when GPUs are there: FAIL with fewer); INFO when no
// GPU is asked for.
Check GpusVisibleCheck(const NodeOptions& options, const GpuFacts& gpu);
// The advertised address is on an interface that is up and running: FAIL
// when it is down or on no interface; INFO when none was given.
Check AdvertisedInterfaceCheck(const NodeOptions& options,
                               const std::vector<InterfaceAddress>& ifaces);

// The three, in that order.
Report DiagnoseNode(const NodeOptions& options, const NodeFacts& facts,
                    const std::string& hostname, const std::string& os);

}  // namespace muster::doctor

#endif  // MUSTER_DOCTOR_NODE_CHECKS_H_
