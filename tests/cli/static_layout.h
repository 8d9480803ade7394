// The launch flag tests' one check of a static rendezvous layout: the node
// count, this node's rank, the workers' master and the embedded server's
// endpoint (from flags, PET_ variables or a Slurm allocation alike).
#ifndef MUSTER_TESTS_CLI_STATIC_LAYOUT_H_
#define MUSTER_TESTS_CLI_STATIC_LAYOUT_H_

#include <string>

#include "gtest/gtest.h"
#include "muster/agent/config.h"

namespace muster::cli {

struct StaticLayout {
  // The workers' MASTER_ADDR and MASTER_PORT, and the rendezvous endpoint.
  std::string master_addr;
  int master_port = -1;
  std::string rdzv_endpoint;
  int nodes = 1;
  int node_rank = 0;
  // Whether this node runs the rendezvous server (node rank 0 does).
  bool embed_server = false;
};

inline void ExpectStaticLayout(const agent::AgentConfig& c,
                               const StaticLayout& want) {
  EXPECT_EQ(c.mode, agent::RendezvousMode::kStatic);
  EXPECT_EQ(c.min_nodes, want.nodes);
  EXPECT_EQ(c.max_nodes, want.nodes);
  EXPECT_EQ(c.node_rank, want.node_rank);
  EXPECT_EQ(c.master_addr, want.master_addr);
  EXPECT_EQ(c.master_port, want.master_port);
  EXPECT_EQ(c.rdzv_endpoint, want.rdzv_endpoint);
  EXPECT_EQ(c.embed_server, want.embed_server);
}

}  // namespace muster::cli

#endif  // MUSTER_TESTS_CLI_STATIC_LAYOUT_H_
