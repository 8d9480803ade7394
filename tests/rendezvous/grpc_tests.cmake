# The gRPC layer on loopback: a real RendezvousServer on 127.0.0.1:0, real clients.
muster_tests(DEPS muster_testing_rendezvous TIMEOUT 60 TESTS
  grpc_store_test
  session_test
  # Session streams on the async API over several completion queues.
  session_stream_test
  # The in-process rendezvous of a standalone job, with a real gRPC store client.
  local_rendezvous_test
  # The musterd binary: flags, --port-file, signals.
  musterd_test
  # The heartbeat budget over gRPC: the client follows musterd's interval; musterd suggests it.
  heartbeat_follow_test
  # Replicas (issue 25): the Session client and `muster status` follow the leader through
  # standbys (muster-leader), skip unreachable replicas, and give up a silent leader.
  replica_client_test
  # Fencing (issue 35): a leader that cannot confirm its leadership holds what agents send and
  # what it would send them, and a stream's end then loses no node.
  fencing_test)
muster_test(rendezvous_server_test SRCS server_test.cc DEPS muster_testing_rendezvous TIMEOUT 60)
add_dependencies(musterd_test musterd)
# musterd --state-dir: the journal survives a restart; bad directories are refused (issue 11).
muster_test(state_journal_test SRCS state_journal_test.cc DEPS muster_rendezvous muster_testing
            TIMEOUT 60)
# Store.Stream: pipelined and out-of-order ops, its bounds, a standby's refusals, and GrpcStore's
# failover between replicas (two servers on loopback; fake leaders for the Add ambiguity).
muster_test(store_stream_test SRCS store_stream_test.cc DEPS muster_testing_rendezvous TIMEOUT 90)
