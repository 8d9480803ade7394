// A v1::Join built from named fields, for tests of the rendezvous (the
// Coordinator on fake channels, the server over gRPC, musterd).
#ifndef MUSTER_TESTS_TESTING_JOIN_H_
#define MUSTER_TESTS_TESTING_JOIN_H_

#include <cstdint>
#include <string>

#include "muster/v1/rendezvous.pb.h"

namespace muster::testing {

// The fields of a v1::Join that tests set; fill with designated initializers
// (in this order): MakeJoin({.job_id = "j", .node_id = "b", .max_nodes = 2}).
// An empty string or 0 leaves the field unset (proto3: the same thing).
struct TestJoin {
  std::string job_id = "job";
  std::string node_id = "a";
  std::string hostname = {};
  std::string advertised_addr = {};
  int local_world_size = 1;
  int min_nodes = 1;
  int max_nodes = 1;
  int node_rank_hint = -1;  // -1: any rank
  int master_port = 0;
  int64_t heartbeat_interval_ms = 0;
  int64_t heartbeat_timeout_ms = 0;
  std::string session_secret = {};
};
v1::Join MakeJoin(const TestJoin& join);

}  // namespace muster::testing

#endif  // MUSTER_TESTS_TESTING_JOIN_H_
