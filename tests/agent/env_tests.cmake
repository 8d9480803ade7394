# The worker environment builder (agent/src/worker_env.cc).
muster_test(worker_env_test SRCS worker_env_test.cc DEPS muster_agent TIMEOUT 30)
