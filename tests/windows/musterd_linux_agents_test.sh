#!/usr/bin/env bash
# musterd.exe under wine serving a job of Linux agents (issue 14, interop).
#
#   musterd_linux_agents_test.sh MUSTERD_EXE LINUX_BUILD_DIR WINE64
#
# 1. Console: `wine64 musterd.exe --listen=127.0.0.1:0 --port-file=...`; two Linux agents
#    (`muster --nnodes=2 --nproc-per-node=2`, the Linux build's launcher) run a job of 4 workers
#    against it; each worker checks its RANK/WORLD_SIZE/LOCAL_RANK/GROUP_RANK; the job exits 0
#    with ranks 0..3 once each. Then Ctrl-C (SIGINT) drains musterd: exit 0, "musterd stopped".
# 2. Service: `musterd.exe --install-service --service-name=muster-test-<random> ...`,
#    `wine64 net start`, SERVICE_RUNNING, the same job, `wine64 net stop` drains it (the log
#    says SIGTERM and "musterd stopped"), `--uninstall-service`, and the service is gone.
# (--http-listen: musterd_http_wine_test.sh.)
#
# Run by ctest in the Windows build (add_test(COMMAND bash ...): this script runs natively,
# musterd.exe under wine64). Skipped (exit 77) without a Linux build. Every wait has a deadline;
# every process started here is reaped, and the service is removed on any exit.
set -uo pipefail

MUSTERD_EXE=${1:?usage: $0 MUSTERD_EXE LINUX_BUILD_DIR WINE64}
LINUX_BUILD=${2:?}
WINE=${3:?}
MUSTER="$LINUX_BUILD/bin/muster"
if [[ ! -x "$MUSTER" ]]; then
  echo "SKIP: no Linux launcher at $MUSTER: build the Linux tree first" \
    "(cmake --preset default && cmake --build build), or configure the Windows build with" \
    "-DMUSTER_LINUX_BUILD_DIR=<a Linux build directory>"
  exit 77
fi
export WINEDEBUG=-all

WORK=$(mktemp -d /tmp/musterd-win-XXXXXX)
SERVICE=""
MUSTERD_PID=""
source "$(dirname "$0")/wine_test_lib.sh"
cleanup() {
  reap "$MUSTERD_PID"
  if [[ -n "$SERVICE" ]]; then
    timeout 60 "$WINE" "$MUSTERD_EXE" --uninstall-service --service-name="$SERVICE" \
      >/dev/null 2>&1
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# The worker: checks the torchrun environment and records its rank.
cat >"$WORK/worker.sh" <<'EOF'
#!/usr/bin/env bash
set -eu
[[ "$WORLD_SIZE" == 4 && "$LOCAL_WORLD_SIZE" == 2 && "$GROUP_WORLD_SIZE" == 2 ]] ||
  { echo "bad sizes: WORLD_SIZE=$WORLD_SIZE LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE" >&2; exit 3; }
[[ "$RANK" == $((GROUP_RANK * 2 + LOCAL_RANK)) ]] ||
  { echo "bad rank $RANK (group $GROUP_RANK, local $LOCAL_RANK)" >&2; exit 4; }
[[ -n "$MASTER_ADDR" && -n "$MASTER_PORT" && -n "$MUSTER_STORE_ENDPOINT" ]] ||
  { echo "no MASTER_ADDR/MASTER_PORT/MUSTER_STORE_ENDPOINT" >&2; exit 5; }
echo "$RANK $WORLD_SIZE" >>"$RANKS_FILE"
EOF
chmod +x "$WORK/worker.sh"

# Two Linux agents (2 workers each) against 127.0.0.1:$1, job $2; asserts exit 0 and ranks 0..3.
run_job() {
  local port=$1 job=$2 pids=() rc=0
  export RANKS_FILE="$WORK/$job.ranks"
  : >"$RANKS_FILE"
  for node in 0 1; do
    timeout 120 "$MUSTER" --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d \
      --rdzv-endpoint="127.0.0.1:$port" --rdzv-id="$job" --no-python "$WORK/worker.sh" \
      >"$WORK/$job-agent$node.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do
    wait "$p" || rc=$?
  done
  ((rc == 0)) || fail "job $job: an agent exited $rc (124: the 120 s deadline)"
  local ranks
  ranks=$(sort -n "$RANKS_FILE" | tr '\n' ',')
  [[ "$ranks" == "0 4,1 4,2 4,3 4," ]] || fail "job $job: ranks/world sizes were '$ranks'"
  echo "job $job: 2 Linux agents x 2 workers finished, ranks 0..3, WORLD_SIZE 4"
}

# --- 1. musterd.exe in the console. ------------------------------------------------------------
"$WINE" "$MUSTERD_EXE" --listen=127.0.0.1:0 --port-file="$(winpath "$WORK/console.port")" \
  >"$WORK/musterd-console.log" 2>&1 &
MUSTERD_PID=$!
PORT=$(wait_port_file "$WORK/console.port" 90) || fail "musterd.exe wrote no port file in 90 s"
echo "musterd.exe (console) serves on 127.0.0.1:$PORT"
run_job "$PORT" console-job
kill -INT "$MUSTERD_PID"
for _ in $(seq 1 150); do kill -0 "$MUSTERD_PID" 2>/dev/null || break; sleep 0.2; done
kill -0 "$MUSTERD_PID" 2>/dev/null && fail "musterd.exe still runs 30 s after SIGINT"
wait "$MUSTERD_PID"
rc=$?
MUSTERD_PID=""
((rc == 0)) || fail "musterd.exe exited $rc after SIGINT"
grep -q "musterd stopped" "$WORK/musterd-console.log" || fail "no 'musterd stopped' after SIGINT"
echo "musterd.exe drained on SIGINT and exited 0"

# --- 2. musterd.exe as a service. --------------------------------------------------------------
SERVICE="muster-test-$$-$RANDOM"
LOG_FILE="$WORK/musterd-service.log"
timeout 60 "$WINE" "$MUSTERD_EXE" --install-service --service-name="$SERVICE" \
  --listen=127.0.0.1:0 --port-file="$(winpath "$WORK/service.port")" \
  --log-file="$(winpath "$LOG_FILE")" >"$WORK/install.log" 2>&1 ||
  fail "--install-service failed: $(cat "$WORK/install.log")"
grep -q "installed the service '$SERVICE'" "$WORK/install.log" || fail "install said nothing"
timeout 90 "$WINE" net start "$SERVICE" >"$WORK/net-start.log" 2>&1 ||
  fail "net start $SERVICE failed: $(cat "$WORK/net-start.log")"
PORT=$(wait_port_file "$WORK/service.port" 90) || fail "the service wrote no port file in 90 s"
state=$(timeout 60 "$WINE" sc query "$SERVICE" 2>&1)
grep -q "RUNNING" <<<"$state" || fail "sc query: not RUNNING: $state"
echo "service $SERVICE RUNNING on 127.0.0.1:$PORT"
run_job "$PORT" service-job
timeout 90 "$WINE" net stop "$SERVICE" >"$WORK/net-stop.log" 2>&1 ||
  fail "net stop $SERVICE failed: $(cat "$WORK/net-stop.log")"
stopped=0
for _ in $(seq 1 150); do
  if timeout 30 "$WINE" sc query "$SERVICE" 2>&1 | grep -q "STOPPED"; then
    stopped=1
    break
  fi
  sleep 0.2
done
((stopped)) || fail "the service is not STOPPED 30 s after net stop"
grep -q "SIGTERM, shutting down" "$LOG_FILE" || fail "the stop did not reach musterd as SIGTERM"
grep -q "musterd stopped" "$LOG_FILE" || fail "the service did not drain ('musterd stopped')"
echo "net stop drained the service (SIGTERM, 'musterd stopped'), STOPPED"
timeout 60 "$WINE" "$MUSTERD_EXE" --uninstall-service --service-name="$SERVICE" \
  >"$WORK/uninstall.log" 2>&1 || fail "--uninstall-service failed: $(cat "$WORK/uninstall.log")"
gone=$(timeout 60 "$WINE" sc query "$SERVICE" 2>&1)
grep -q "RUNNING\|STOPPED" <<<"$gone" && fail "the service is still there: $gone"
SERVICE=""
echo "uninstalled; PASS"
