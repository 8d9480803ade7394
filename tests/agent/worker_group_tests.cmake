# The worker group: processes, output, signals (owned with agent/src/worker_group.cc and platform/posix/process_group.cc).
muster_test(worker_group_test SRCS worker_group_test.cc DEPS muster_agent TIMEOUT 120)
add_dependencies(worker_group_test test_worker)
muster_test(line_splitter_test SRCS line_splitter_test.cc DEPS muster_agent TIMEOUT 30)
