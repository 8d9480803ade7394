// Slurm for the launcher: hostlist expansion, and the node layout an
// allocation implies.
//
// Inside an allocation (a task of `srun`, or an `sbatch` script), Slurm tells
// every task the job id, the number of nodes, this node's index and the node
// list. `muster --nproc-per-node=4 train` then needs no other flag: the node
// count, node rank and master come from Slurm, and the job id names the
// rendezvous.
#ifndef MUSTER_CLI_SLURM_H_
#define MUSTER_CLI_SLURM_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace muster::cli {

// A hostlist may expand to at most this many hosts.
inline constexpr int kMaxHostlistHosts = 65536;

// Expands a Slurm hostlist into host names, in order:
//   "gpu[01-04,07]"     -> gpu01 gpu02 gpu03 gpu04 gpu07
//   "a,b[1-2]"          -> a b1 b2
//   "n[8-10]"           -> n8 n9 n10
//   "n[08-10]"          -> n08 n09 n10   (a range keeps its lower bound's
//   width) "r[1-2]-n[1-2]"     -> r1-n1 r1-n2 r2-n1 r2-n2 (groups multiply)
// Commas inside brackets separate ranges; outside they separate names.
// Leading and trailing whitespace of the whole list is ignored.
// Errors: INVALID_ARGUMENT that quotes `hostlist` and says what is wrong (an
// unbalanced bracket, an empty name or range, a character that is not a digit
// in a range, a range whose end is below its start, more than
// kMaxHostlistHosts hosts). Pure; thread-safe.
absl::StatusOr<std::vector<std::string>> ExpandHostlist(
    absl::string_view hostlist);

// What one task of a Slurm job step sees of its allocation.
struct SlurmAllocation {
  // SLURM_JOB_ID.
  std::string job_id;
  // SLURM_NNODES: nodes of the step (of the job in an sbatch script).
  int nnodes = 0;
  // SLURM_NODEID: this node's index among them, 0..nnodes-1.
  int node_id = 0;
  // The expanded node list; at least nnodes names.
  std::vector<std::string> hosts;
  // The variable the node list came from: SLURM_STEP_NODELIST,
  // SLURM_JOB_NODELIST or SLURM_NODELIST (the first one set, in that order).
  std::string nodelist_source;
};

// Reads the allocation from `env` (the process environment).
// Returns nullopt when `env` is not inside an allocation: one of SLURM_JOB_ID,
// SLURM_NNODES, SLURM_NODEID and a node list (SLURM_JOB_NODELIST or
// SLURM_NODELIST) is missing or empty (e.g. a shell of `salloc` on the login
// node, which has no SLURM_NODEID).
// Errors: INVALID_ARGUMENT naming the variable and its value when one is
// malformed (SLURM_NNODES=abc, a bad hostlist) or they disagree (SLURM_NODEID
// not below SLURM_NNODES, a node list shorter than SLURM_NNODES). Pure.
absl::StatusOr<std::optional<SlurmAllocation>> DetectSlurmAllocation(
    const std::map<std::string, std::string>& env);

// A launcher flag implied by the allocation: --`flag`=`value`, from the
// variable `source` (which error messages name instead of a flag the user
// never typed).
struct ImpliedFlag {
  std::string flag;  // dash name without "--", e.g. "nnodes"
  std::string value;
  std::string source;  // e.g. "SLURM_NNODES"
};

// The flags that a Slurm allocation gives the launcher, for the flags the user
// did not give. `given(name)` returns the value of the flag with dash name
// `name` when it was given (on the command line or as PET_<FLAG>), else
// nullptr.
//
// Empty when `env` is not inside an allocation, and when the user pinned the
// layout themselves with any of --nnodes, --node-rank, --master-addr,
// --standalone or an --rdzv-endpoint with a host: flags given explicitly win,
// whole. (--rdzv-endpoint=:PORT only moves the port of the server that node
// rank 0 runs, and --master-port the workers' MASTER_PORT: both combine with
// Slurm's layout, e.g. on nodes shared with another job.) Otherwise:
//   nnodes      = SLURM_NNODES
//   node-rank   = SLURM_NODEID
//   master-addr = the first host of the node list (only when nnodes > 1: a
//                 single node runs standalone, on ephemeral ports, so that two
//                 one-node jobs sharing a machine never collide)
//   rdzv-id     = SLURM_JOB_ID, unless --rdzv-id was given.
// Static rendezvous follows: node rank 0 (the first host) runs the server on
// port 29400 and the others join it.
// Errors: those of DetectSlurmAllocation, and INVALID_ARGUMENT when the step
// runs more than one task on this node (SLURM_LOCALID > 0): muster is one
// agent per node that starts the workers itself, so it belongs in
// `srun --ntasks-per-node=1`. Pure.
absl::StatusOr<std::vector<ImpliedFlag>> SlurmImpliedFlags(
    const std::map<std::string, std::string>& env,
    const std::function<const std::string*(absl::string_view)>& given);

}  // namespace muster::cli

#endif  // MUSTER_CLI_SLURM_H_
