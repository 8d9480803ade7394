#!/usr/bin/env bash
# Slurm, simulated on this machine: what `srun -N2 --ntasks-per-node=1 muster ...` starts, two
# agents whose only layout information is the SLURM_* environment of their task (job id, node
# count, node id, node list), on ports of their own (--rdzv-endpoint=:PORT --master-port=PORT
# combine with Slurm's layout, as on nodes shared with other jobs). The job must succeed with the
# job id as the rendezvous id; then a bad node list must fail both agents with exit 2.
# usage: slurm_sim_test.sh BIN_DIR
source "$(dirname "$0")/lib.sh"
bin=$1
scratch
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rdzv_port=$(free_port)
master_port=$(free_port)
[[ $rdzv_port != "$master_port" ]] || master_port=$((master_port + 1))

# srun's environment for the task on node $1 of a 2-node job, plus the loopback stand-ins for
# the nodes' own addresses.
task() {
  local node=$1 nodelist=$2
  shift 2
  env SLURM_JOB_ID=4242 SLURM_NNODES=2 SLURM_NODEID="$node" SLURM_LOCALID=0 \
    SLURM_JOB_NODELIST="$nodelist" SLURM_STEP_NODELIST="$nodelist" \
    PET_LOCAL_ADDR=127.0.0.1 MUSTER_SOCKET_IFNAME=lo "$@"
}

step "2 nodes x 2 workers from SLURM_* alone (node list localhost,127.0.0.1: master localhost)"
for node in 0 1; do
  task $node "localhost,127.0.0.1" setsid "$bin/muster" --rdzv-endpoint=":$rdzv_port" \
    --master-port="$master_port" --nproc-per-node=2 "$bin/train" --epochs=5 \
    >"$SCRATCH/node$node.log" 2>&1 &
  PIDS+=($!)
done
for i in 0 1; do
  if ! timeout 120 tail --pid="${PIDS[$i]}" -f /dev/null; then fail "node $i still running after 120 s"; fi
  wait "${PIDS[$i]}" || { cat "$SCRATCH"/node*.log; fail "node $i exited $?"; }
done
cat "$SCRATCH/node0.log" | grep -E "^rank [0-9]|joined job" || true
grep -q "joined job '4242'" "$SCRATCH/node0.log" || { cat "$SCRATCH/node0.log"; fail "the rendezvous id is not SLURM_JOB_ID"; }
grep -q "all 4 ranks agree" "$SCRATCH/node0.log" || { cat "$SCRATCH"/node*.log; fail "the 4 ranks did not agree"; }

step "a bad SLURM_JOB_NODELIST is a configuration error (exit 2) naming it"
expect_exit 2 "$SCRATCH/bad.log" "muster with a bad node list" \
  task 0 "gpu[01-" "$bin/muster" --nproc-per-node=1 /bin/true
grep -q 'SLURM_STEP_NODELIST=gpu\[01-' "$SCRATCH/bad.log" || fail "the message does not name the variable"
echo "slurm simulation: ok"
