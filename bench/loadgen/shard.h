// One process's share of muster-loadgen's simulated agents (--processes=N
// runs N shards). The parent forks each shard before any gRPC object exists
// (gRPC is not fork-safe once initialised); the shard then creates its own
// channels, completion queues (each drained by its own thread) and heartbeat
// thread, and steps through the run's phases when the parent says so, over
// the line protocol of protocol.h. All shards' agents join the same jobs.
#ifndef MUSTER_BENCH_LOADGEN_SHARD_H_
#define MUSTER_BENCH_LOADGEN_SHARD_H_

#include <string>

#include "absl/time/time.h"
#include "bench/loadgen/sim_agent.h"

namespace muster::loadgen {

struct ShardOptions {
  std::string endpoint;  // musterd, HOST:PORT
  std::string run;       // job ids are "<run>-<job>"; the same in every shard
  int jobs = 1;
  int per_job = 1;  // agents of each job = its min and max nodes
  int nproc = 1;    // local_world_size of each agent
  // This shard's agents: global indices [begin, end) of per_job * jobs.
  // Agent i is node "n<i>" of job i % jobs.
  int begin = 0;
  int end = 0;
  // The agent the node loss kills (job 0's second); the shard that holds it
  // starts the replacement, global index per_job * jobs.
  int victim = 0;
  int channels = 16;  // HTTP/2 connections of this shard
  int queues = 32;    // completion queues (and their threads) of this shard
  HeartbeatPolicy policy;
  absl::Duration heartbeat_timeout = kHeartbeatTimeout;
  // Longest wait for a round (the first, and the one after the node loss).
  absl::Duration form_timeout = absl::Seconds(60);
  // Longest wait for the parent's next command; then the shard gives up.
  absl::Duration command_timeout = absl::Seconds(300);
};

// Runs one shard: reads commands from `from_parent`, replies on `to_parent`,
// and never returns. It exits (_exit: nothing of the parent's is flushed
// twice) with 0 after its reply to "end", and with 1 when the parent's pipe
// closes (the parent died or gave up), a reply cannot be written, or no
// command came within command_timeout.
[[noreturn]] void RunShard(const ShardOptions& options, int from_parent,
                           int to_parent);

}  // namespace muster::loadgen

#endif  // MUSTER_BENCH_LOADGEN_SHARD_H_
