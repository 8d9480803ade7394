#!/usr/bin/env bash
# `muster.exe stacks` on a running job of Windows workers (issue 40), all under wine.
#
#   stacks_wine_test.sh MUSTER_EXE MUSTERD_EXE WIN_WORKER_EXE WINE64
#
# musterd.exe listens on 127.0.0.1 (a free port, --port-file); two agents (`wine64 muster.exe
# --nnodes=2 --nproc-per-node=2 --rdzv-backend=muster`) run 4 ranks of `win_worker.exe
# --stacks-odd-rank=3`: ranks 0-2 hang in WaitInBarrier_Muster, rank 3 in
# StuckInDataLoader_Muster. Then `muster.exe stacks --json` must give Linux's grouping: ranks
# 0-2 in one group whose frames name muster_test::WaitInBarrier_Muster(), rank 3 alone in one
# naming muster_test::StuckInDataLoader_Muster() and marked the odd one out, no agent missing,
# kind "native"; the text form names rank 3 as the odd one out; and the agents still run
# (every worker thread was resumed). Then the hang report: `muster.exe --standalone
# --worker-timeout=3` of 2 such ranks prints both functions before the watchdog kills them.
#
# Run by ctest in the Windows build (add_test(COMMAND bash ...): this script runs natively, the
# .exe under wine64). Every wait has a deadline (the port file 60 s, the workers 180 s, each
# `stacks` 60 s, the hang-report run 120 s, musterd's stop 30 s); every process started here is
# reaped; a wineserver this script started for WINEPREFIX is ended at the end.
set -uo pipefail

MUSTER_EXE=${1:?usage: $0 MUSTER_EXE MUSTERD_EXE WIN_WORKER_EXE WINE64}
MUSTERD_EXE=${2:?}
WORKER_EXE=${3:?}
WINE=${4:?}
export WINEDEBUG=-all

WORK=$(mktemp -d /tmp/muster-wstacks-XXXXXX)
MUSTERD_PID=""
AGENT_PIDS=()

source "$(dirname "$0")/wine_test_lib.sh"
OWN_WINESERVER=1
wineserver_running && OWN_WINESERVER=0
# The agents run under `timeout`, which passes SIGTERM on to wine64 (a -9 would end only
# `timeout`); an agent's end closes its kill-on-close job object, which ends its workers.
stop_agents() {
  local p deadline=$((SECONDS + 20))
  for p in "${AGENT_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${AGENT_PIDS[@]}"; do
    while kill -0 "$p" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  done
  reap "${AGENT_PIDS[@]}"
  AGENT_PIDS=()
}
cleanup() {
  stop_agents
  reap "$MUSTERD_PID"
  if ((OWN_WINESERVER)); then
    "$(dirname "$WINE")/wineserver" -k >/dev/null 2>&1
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

"$WINE" "$MUSTERD_EXE" --listen=127.0.0.1:0 --port-file="$(winpath "$WORK/musterd.port")" \
  >"$WORK/musterd.log" 2>&1 &
MUSTERD_PID=$!
PORT=$(wait_port_file "$WORK/musterd.port" 60) || fail "musterd.exe wrote no port file in 60 s"
echo "musterd.exe serves on 127.0.0.1:$PORT"

JOB=win-stacks
for node in 0 1; do
  timeout 300 "$WINE" "$MUSTER_EXE" --nnodes=2 --nproc-per-node=2 --rdzv-backend=muster \
    --rdzv-endpoint="127.0.0.1:$PORT" --rdzv-id=$JOB --max-restarts=0 --prefix-output \
    --no-python "$(winpath "$WORKER_EXE")" --stacks-odd-rank=3 >"$WORK/agent$node.log" 2>&1 &
  AGENT_PIDS+=($!)
done
started=$SECONDS
deadline=$((SECONDS + 180))
until (($(cat "$WORK"/agent*.log 2>/dev/null | grep -ac "waiting in") >= 4)); do
  ((SECONDS < deadline)) || fail "the 4 workers did not all say where they wait within 180 s"
  for p in "${AGENT_PIDS[@]}"; do
    kill -0 "$p" 2>/dev/null || fail "an agent exited before its workers hung"
  done
  sleep 0.5
done
echo "4 workers hang ($((SECONDS - started)) s)"

# stacks FORMAT: `muster.exe stacks` into $WORK/stacks.FORMAT; its exit status in RC.
stacks() {
  local args=(stacks --rdzv-endpoint="127.0.0.1:$PORT" "$JOB")
  [[ $1 == json ]] && args+=(--json)
  timeout 60 "$WINE" "$MUSTER_EXE" "${args[@]}" >"$WORK/stacks.$1" 2>"$WORK/stacks-$1.log"
  RC=$?
}

# The JSON's check, in Python (the host's): prints what is wrong, nothing when all is right.
check_json() {
  python3 - "$WORK/stacks.json" <<'EOF'
import json, sys
try:
    j = json.load(open(sys.argv[1], encoding="utf-8"))
except Exception as e:
    print("not JSON:", e); sys.exit()
groups = {tuple(g["ranks"]): g for g in j.get("groups", [])}
rest, odd = groups.get((0, 1, 2)), groups.get((3,))
if j.get("job") != "win-stacks": print("job is", j.get("job"))
if j.get("missing"): print("missing:", j["missing"])
if rest is None or odd is None: print("groups are", list(groups)); sys.exit()
if "muster_test::WaitInBarrier_Muster()" not in rest["frames"]:
    print("ranks 0-2's frames:", rest["frames"])
if "muster_test::StuckInDataLoader_Muster()" not in odd["frames"]:
    print("rank 3's frames:", odd["frames"])
if not odd.get("odd_one_out") or rest.get("odd_one_out"):
    print("odd_one_out: rank 3", odd.get("odd_one_out"), "ranks 0-2", rest.get("odd_one_out"))
if rest.get("kind") != "native" or odd.get("kind") != "native":
    print("kinds:", rest.get("kind"), odd.get("kind"))
if j["groups"][0]["ranks"] != [0, 1, 2]: print("the largest group is not first")
EOF
}

# A worker's helper thread may not be in its loop at the first read: read until right (60 s).
started=$SECONDS
deadline=$((SECONDS + 60))
while :; do
  stacks json
  problems=""
  ((RC == 0)) || problems="exit $RC: $(tail -n 3 "$WORK/stacks-json.log")"
  [[ -n "$problems" ]] || problems=$(check_json)
  [[ -z "$problems" ]] && break
  ((SECONDS < deadline)) ||
    fail "muster.exe stacks --json: $problems; output: $(cat "$WORK/stacks.json")"
  sleep 1
done
echo "1. stacks --json: ranks 0-2 in WaitInBarrier_Muster, rank 3 alone in" \
  "StuckInDataLoader_Muster and the odd one out ($((SECONDS - started)) s)"

stacks text
((RC == 0)) || fail "muster.exe stacks: exit $RC: $(cat "$WORK/stacks-text.log")"
tr -d '\r' <"$WORK/stacks.text" >"$WORK/stacks.txt"
grep -q "^odd ones out: rank 3 " "$WORK/stacks.txt" ||
  fail "muster.exe stacks: no 'odd ones out: rank 3': $(cat "$WORK/stacks.txt")"
grep -q "muster_test::StuckInDataLoader_Muster()" "$WORK/stacks.txt" ||
  fail "muster.exe stacks: no StuckInDataLoader_Muster: $(cat "$WORK/stacks.txt")"
echo "2. stacks (text):"
sed 's/^/    /' "$WORK/stacks.txt"

# The job runs on: the capture left every worker running.
for p in "${AGENT_PIDS[@]}"; do
  kill -0 "$p" 2>/dev/null || fail "an agent ended after the capture"
done
grep -aq "win_worker rank .* done\|failed" "$WORK"/agent*.log &&
  fail "a worker ended after the capture"

stop_agents
# --- 3. The hang report: the watchdog reads the same stacks before it kills. ----------------
started=$SECONDS
mkdir -p "$WORK/logs"
timeout 120 "$WINE" "$MUSTER_EXE" --standalone --nproc-per-node=2 --worker-timeout=3 \
  --max-restarts=0 --log-dir="$(winpath "$WORK/logs")" --no-python "$(winpath "$WORKER_EXE")" \
  --stacks-odd-rank=1 >"$WORK/hang.log" 2>&1
rc=$?
((rc != 124)) || fail "hang report: muster.exe --worker-timeout=3 did not end within 120 s"
((rc != 0)) || fail "hang report: muster.exe exited 0 with hung workers"
tr -d '\r' <"$WORK/hang.log" >"$WORK/hang.txt"
grep -q "^hang report: ranks 0-1 made no progress" "$WORK/hang.txt" ||
  fail "hang report: no 'hang report: ranks 0-1 made no progress' line"
for f in WaitInBarrier_Muster StuckInDataLoader_Muster; do
  grep -q "^    muster_test::$f()" "$WORK/hang.txt" || fail "hang report: $f not named"
done
compgen -G "$WORK/logs/*/hang_report_attempt_0.json" >/dev/null ||
  fail "hang report: no hang_report_attempt_0.json under the log dir"
echo "3. --worker-timeout=3: the hang report names both functions, hang_report_attempt_0.json" \
  "written ($((SECONDS - started)) s)"

# musterd.exe drains on Ctrl-C (SIGINT reaches its console handler).
kill -INT "$MUSTERD_PID"
deadline=$((SECONDS + 30))
while kill -0 "$MUSTERD_PID" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
kill -0 "$MUSTERD_PID" 2>/dev/null && fail "musterd.exe still runs 30 s after SIGINT"
wait "$MUSTERD_PID"
MUSTERD_PID=""
echo "PASS"
