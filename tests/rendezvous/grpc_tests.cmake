# The gRPC layer on loopback: a real RendezvousServer on 127.0.0.1:0, real clients.
muster_test(grpc_store_test SRCS grpc_store_test.cc DEPS muster_testing_rendezvous TIMEOUT 60)
muster_test(rendezvous_server_test SRCS server_test.cc DEPS muster_testing_rendezvous TIMEOUT 60)
muster_test(session_test SRCS session_test.cc DEPS muster_testing_rendezvous TIMEOUT 60)
# Session streams on the async API over several completion queues.
muster_test(session_stream_test SRCS session_stream_test.cc DEPS muster_testing_rendezvous
            TIMEOUT 60)
# The in-process rendezvous of a standalone job, with a real gRPC store client.
muster_test(local_rendezvous_test SRCS local_rendezvous_test.cc DEPS muster_testing_rendezvous TIMEOUT 60)
# The musterd binary: flags, --port-file, signals.
muster_test(musterd_test SRCS musterd_test.cc DEPS muster_testing_rendezvous TIMEOUT 60)
add_dependencies(musterd_test musterd)
# musterd --state-dir: the journal survives a restart; bad directories are refused (issue 11).
muster_test(state_journal_test SRCS state_journal_test.cc DEPS muster_rendezvous muster_testing
            TIMEOUT 60)
# The heartbeat budget over gRPC: the client follows musterd's interval; musterd suggests it.
muster_test(heartbeat_follow_test SRCS heartbeat_follow_test.cc DEPS muster_testing_rendezvous
            TIMEOUT 60)
# Store.Stream: pipelined and out-of-order ops, its bounds, a standby's refusals, and GrpcStore's
# failover between replicas (two servers on loopback; fake leaders for the Add ambiguity).
muster_test(store_stream_test SRCS store_stream_test.cc DEPS muster_testing_rendezvous TIMEOUT 90)
# Replicas (issue 25): the Session client and `muster status` follow the leader through
# standbys (muster-leader), skip unreachable replicas, and give up a silent leader.
muster_test(replica_client_test SRCS replica_client_test.cc DEPS muster_testing_rendezvous
            TIMEOUT 60)
