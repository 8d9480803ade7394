#include "tests/testing/join.h"

namespace muster::testing {

v1::Join MakeJoin(const TestJoin& join) {
  v1::Join out;
  // Who joins, and where its peers reach it.
  *out.mutable_job_id() = join.job_id;
  *out.mutable_node_id() = join.node_id;
  *out.mutable_hostname() = join.hostname;
  *out.mutable_advertised_addr() = join.advertised_addr;
  // The round it fits in.
  out.set_local_world_size(join.local_world_size);
  out.set_min_nodes(join.min_nodes);
  out.set_max_nodes(join.max_nodes);
  out.set_node_rank_hint(join.node_rank_hint);
  // Its session.
  *out.mutable_session_secret() = join.session_secret;
  out.set_master_port(join.master_port);
  out.set_heartbeat_interval_ms(join.heartbeat_interval_ms);
  out.set_heartbeat_timeout_ms(join.heartbeat_timeout_ms);
  return out;
}

}  // namespace muster::testing
