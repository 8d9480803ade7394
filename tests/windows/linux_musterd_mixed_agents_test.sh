#!/usr/bin/env bash
# A musterd serving one job of a Linux agent and a Windows agent (issue 14, interop).
#
#   linux_musterd_mixed_agents_test.sh MUSTER_EXE WIN_WORKER_EXE COMM_WORKER_EXE LINUX_BUILD_DIR WINE64 \
#       [MUSTERD_EXE]
#
# The Linux build's musterd (or, given MUSTERD_EXE, `wine64 musterd.exe`: ctest's
# windows_musterd_mixed_agents_test) listens on 127.0.0.1 (a free port, --port-file); in each job one
# Linux agent (LINUX_BUILD_DIR/bin/muster) and one Windows agent (`wine64 muster.exe`) start at
# the same time with the same flags (--nnodes=2 --nproc-per-node=1 --rdzv-backend=muster):
# 1. env: each worker (a bash script on Linux, win_worker.exe --print-env on Windows) prints the
#    torchrun environment; both agents exit 0; RANK 0 and 1 appear once each; WORLD_SIZE=2,
#    GROUP_WORLD_SIZE=2, LOCAL_RANK=0 on both; GROUP_RANK equals RANK; MASTER_ADDR,
#    MASTER_PORT, MUSTER_STORE_ENDPOINT, MUSTER_STORE_PREFIX, MUSTER_ROUND and
#    TORCHELASTIC_RUN_ID are identical on both.
# 2. collectives: the workers are comm_worker (Linux) and comm_worker.exe (Windows),
#    `--mode=agree` with env:// init from the agents' environment: both find that their Gloo
#    transports differ (TCP on Linux, libuv on Windows: not one protocol) and run on
#    libmuster_comm's own mesh ("direct"); AllReduce (1000 and 2^20 float32, int64 max),
#    AllGather, Broadcast and Barrier each match the expected values on both, and both print
#    the same digest of every result.
#
# Run by ctest in the Windows build (add_test(COMMAND bash ...): this script runs natively,
# muster.exe under wine64). Skipped (exit 77) without a Linux build. Every wait has a deadline
# (agents 240 s, the port file 60 s, musterd's stop 30 s); every process started here is reaped;
# a wineserver this script started for WINEPREFIX is ended at the end.
set -uo pipefail

MUSTER_EXE=${1:?usage: $0 MUSTER_EXE WIN_WORKER_EXE COMM_WORKER_EXE LINUX_BUILD_DIR WINE64}
WIN_WORKER_EXE=${2:?}
WIN_COMM_WORKER_EXE=${3:?}
LINUX_BUILD=${4:?}
WINE=${5:?}
MUSTERD_EXE=${6:-}
for tool in muster musterd comm_worker; do
  if [[ ! -x "$LINUX_BUILD/bin/$tool" ]]; then
    echo "SKIP: no Linux $tool at $LINUX_BUILD/bin/$tool: build the Linux tree first" \
      "(cmake --preset default && cmake --build build), or configure the Windows build with" \
      "-DMUSTER_LINUX_BUILD_DIR=<a Linux build directory>"
    exit 77
  fi
done
export WINEDEBUG=-all

WORK=$(mktemp -d /tmp/muster-mixed-XXXXXX)
MUSTERD_PID=""
AGENT_PIDS=()

source "$(dirname "$0")/wine_test_lib.sh"
# A wineserver the agents start for WINEPREFIX is ended at the end.
OWN_WINESERVER=1
wineserver_running && OWN_WINESERVER=0
cleanup() {
  reap "${AGENT_PIDS[@]}" "$MUSTERD_PID"
  if ((OWN_WINESERVER)); then
    "$(dirname "$WINE")/wineserver" -k >/dev/null 2>&1
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# --- The musterd: Linux's, or musterd.exe under wine. ---------------------------------------
if [[ -n "$MUSTERD_EXE" ]]; then
  SERVER=Windows
  "$WINE" "$MUSTERD_EXE" --listen=127.0.0.1:0 --port-file="$(winpath "$WORK/musterd.port")" \
    >"$WORK/musterd.log" 2>&1 &
else
  SERVER=Linux
  "$LINUX_BUILD/bin/musterd" --listen=127.0.0.1:0 --port-file="$WORK/musterd.port" \
    >"$WORK/musterd.log" 2>&1 &
fi
MUSTERD_PID=$!
PORT=$(wait_port_file "$WORK/musterd.port" 60) || fail "musterd wrote no port file in 60 s"
echo "$SERVER musterd serves on 127.0.0.1:$PORT"

# run_job JOB "LINUX WORKER ARGS..." "WINDOWS WORKER ARGS...": one Linux and one Windows agent
# (1 worker each) in job JOB, at once; both must exit 0 within 240 s. Logs: $WORK/JOB-*.log.
run_job() {
  local job=$1 linux_cmd=$2 windows_cmd=$3 rc flags p
  flags=(--nnodes=2 --nproc-per-node=1 --rdzv-backend=muster
    --rdzv-endpoint="127.0.0.1:$PORT" --rdzv-id="$job" --max-restarts=0 --prefix-output
    --no-python)
  # shellcheck disable=SC2086 # the commands are word lists
  timeout 240 "$LINUX_BUILD/bin/muster" "${flags[@]}" $linux_cmd >"$WORK/$job-linux.log" 2>&1 &
  AGENT_PIDS=($!)
  # shellcheck disable=SC2086
  timeout 240 "$WINE" "$MUSTER_EXE" "${flags[@]}" $windows_cmd >"$WORK/$job-windows.log" 2>&1 &
  AGENT_PIDS+=($!)
  # The first agent to fail fails the job at once (the other is killed on exit).
  local linux_pid=${AGENT_PIDS[0]} which
  local -a waiting=("${AGENT_PIDS[@]}")
  while ((${#waiting[@]} > 0)); do
    wait -n -p which "${waiting[@]}"
    rc=$?
    ((rc == 0)) || fail "job $job: the $([[ $which == "$linux_pid" ]] && echo Linux ||
      echo Windows) agent exited $rc (124: the 240 s deadline)"
    local -a still=()
    for p in "${waiting[@]}"; do [[ "$p" == "$which" ]] || still+=("$p"); done
    waiting=("${still[@]}")
  done
  AGENT_PIDS=()
}

# The value of `env NAME=VALUE` in log $1 for NAME $2 (the worker's line, after the agent's
# [rankN]: prefix of --prefix-output; wine's lines end in \r).
env_of() {
  grep -aE "^\[rank[0-9]+\]:env $2=" "$1" | head -n 1 | sed -E "s/^[^=]*=//; s/\r$//"
}

# --- 1. The environment agrees. -----------------------------------------------------------
cat >"$WORK/env_worker.sh" <<'EOF'
#!/usr/bin/env bash
for v in RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK GROUP_WORLD_SIZE MASTER_ADDR \
  MASTER_PORT TORCHELASTIC_RUN_ID MUSTER_STORE_ENDPOINT MUSTER_STORE_PREFIX MUSTER_ROUND; do
  echo "env $v=${!v-<unset>}"
done
EOF
chmod +x "$WORK/env_worker.sh"
started=$SECONDS
run_job env-job "$WORK/env_worker.sh" "$(winpath "$WIN_WORKER_EXE") --print-env"
L="$WORK/env-job-linux.log"
W="$WORK/env-job-windows.log"
ranks=$(printf '%s\n%s\n' "$(env_of "$L" RANK)" "$(env_of "$W" RANK)" | sort -n | tr '\n' ' ')
[[ "$ranks" == "0 1 " ]] || fail "env job: RANKs were '$ranks', not 0 and 1 once each"
for log in "$L" "$W"; do
  for kv in WORLD_SIZE=2 GROUP_WORLD_SIZE=2 LOCAL_WORLD_SIZE=1 LOCAL_RANK=0; do
    [[ "$(env_of "$log" "${kv%%=*}")" == "${kv#*=}" ]] ||
      fail "env job: $(basename "$log"): ${kv%%=*}='$(env_of "$log" "${kv%%=*}")', not ${kv#*=}"
  done
  [[ "$(env_of "$log" GROUP_RANK)" == "$(env_of "$log" RANK)" ]] ||
    fail "env job: $(basename "$log"): GROUP_RANK differs from RANK"
done
for v in MASTER_ADDR MASTER_PORT MUSTER_STORE_ENDPOINT MUSTER_STORE_PREFIX MUSTER_ROUND \
  TORCHELASTIC_RUN_ID; do
  a=$(env_of "$L" $v)
  b=$(env_of "$W" $v)
  [[ -n "$a" && "$a" != "<unset>" && "$a" == "$b" ]] ||
    fail "env job: $v is '$a' on Linux and '$b' on Windows"
done
[[ "$(env_of "$L" MASTER_PORT)" =~ ^[0-9]+$ ]] || fail "env job: MASTER_PORT is not a number"
echo "1. env: Linux RANK=$(env_of "$L" RANK), Windows RANK=$(env_of "$W" RANK), WORLD_SIZE=2" \
  "on both; MASTER_ADDR:MASTER_PORT $(env_of "$L" MASTER_ADDR):$(env_of "$L" MASTER_PORT)" \
  "and the store agree ($((SECONDS - started)) s)"

# --- 2. Collectives agree across the OSes. ------------------------------------------------
started=$SECONDS
run_job comm-job "$LINUX_BUILD/bin/comm_worker --mode=agree --timeout=180" \
  "$(winpath "$WIN_COMM_WORKER_EXE") --mode=agree --timeout=180"
result() { grep -aE "^\[rank[0-9]+\]:rank [0-9]/2 \(direct\): agree OK, digest" "$1" | sed 's/\r$//'; }
lr=$(result "$WORK/comm-job-linux.log")
wr=$(result "$WORK/comm-job-windows.log")
[[ -n "$lr" ]] || fail "comm job: the Linux worker did not agree on the direct mesh"
[[ -n "$wr" ]] || fail "comm job: the Windows worker did not agree on the direct mesh"
digest() { sed -E 's/.*digest ([0-9a-f]+),.*/\1/' <<<"$1"; }
[[ "$(digest "$lr")" == "$(digest "$wr")" ]] ||
  fail "comm job: different results: Linux '$lr', Windows '$wr'"
grep -aq "cannot share a Gloo mesh (rank 0: gloo-" "$WORK/comm-job-linux.log" \
  "$WORK/comm-job-windows.log" || fail "comm job: no warning naming the two Gloo transports"
echo "2. collectives: Linux '${lr#*:}'; Windows '${wr#*:}' ($((SECONDS - started)) s)"

# --- musterd drains on SIGTERM (musterd.exe on Ctrl-C: SIGINT reaches its console handler). --
sig=TERM
[[ "$SERVER" == Windows ]] && sig=INT
kill -"$sig" "$MUSTERD_PID"
deadline=$((SECONDS + 30))
while kill -0 "$MUSTERD_PID" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
kill -0 "$MUSTERD_PID" 2>/dev/null && fail "musterd still runs 30 s after SIG$sig"
wait "$MUSTERD_PID"
rc=$?
MUSTERD_PID=""
((rc == 0)) || fail "musterd exited $rc after SIG$sig"
echo "PASS"
