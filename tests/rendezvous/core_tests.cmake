# The rendezvous state machine (Coordinator) and the rank rules: pure logic on fake channels and
# a FakeClock, no sockets and no sleeps.
muster_tests(DEPS muster_rendezvous_core TIMEOUT 30 TESTS
  rank_assignment_test
  # Lease fencing, the server's side (issue 11 item 3): silent loss after the lease, renewals.
  lease_test
  # The coordinator's transition table (issue 29): every forbidden transition rejected.
  job_phase_test
  # Re-adoption of a running round by a restarted musterd (issue 11 item 4).
  adoption_test
  # Stragglers (issue 38): the speed score, the threshold's hysteresis, the round reset.
  straggler_tracker_test
  # The straggler watch in the Coordinator: named, replaced by a spare, excluded, the cooldown;
  # exclusion for a failed health check or rounds failed in a row; returning nodes first.
  coordinator_stragglers_test)
muster_test(coordinator_test SRCS coordinator_test.cc DEPS muster_rendezvous_core TIMEOUT 60)
# The Coordinator at 10,000 agents: linear message counts, coalesced Waiting, the deadline queue.
muster_test(coordinator_scale_test SRCS coordinator_scale_test.cc DEPS muster_rendezvous_core
            TIMEOUT 120)
# The heartbeat budget (issue 15): the interval musterd suggests, the one agents follow, renewals.
muster_test(heartbeat_budget_test SRCS heartbeat_budget_test.cc
            DEPS muster_rendezvous_core muster_testing_join TIMEOUT 30)
