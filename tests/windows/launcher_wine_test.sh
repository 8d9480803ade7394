#!/usr/bin/env bash
# muster.exe under wine launching Windows workers (issue 14, the launcher).
#
#   launcher_wine_test.sh MUSTER_EXE WIN_WORKER_EXE WINE64
#
# Each case runs `wine64 muster.exe --standalone --nproc-per-node=2 ... win_worker.exe ...`
# (win_worker.cc says what its flags do) and checks the outcome:
# 1. success: exit 0; each rank printed the torchrun environment (RANK, LOCAL_RANK,
#    WORLD_SIZE=2, MASTER_ADDR, MASTER_PORT, MUSTER_STORE_ENDPOINT, MUSTER_STOP_EVENT, ...)
#    with its [rankN]: prefix (--prefix-output), and its "done" line;
# 2. a failing worker (rank 1 exits 3): exit 1, the failure summary names rank 1 and
#    "exited with code 3";
# 3. a crashing worker: the summary names 0xC0000005 (STATUS_ACCESS_VIOLATION);
# 4. --max-restarts=1: rank 0 fails in attempt 0 only; the job restarts and exits 0, the
#    workers of the second round see TORCHELASTIC_RESTART_COUNT=1;
# 5. launcher killed (SIGKILL to the wine process of muster.exe) while both workers hang: the
#    workers' kill-on-close job objects end them (their heartbeat files stop changing);
# 6. launcher interrupted (SIGINT reaches muster.exe's console handler): it stops the
#    workers (the stop event, then TerminateJobObject after the grace period) and exits
#    128+2; the workers are gone.
#
# Run by ctest in the Windows build (add_test(COMMAND bash ...): this script runs natively,
# muster.exe under wine64). Every wait has a deadline; every process started here is reaped.
set -uo pipefail

MUSTER_EXE=${1:?usage: $0 MUSTER_EXE WIN_WORKER_EXE WINE64}
WORKER_EXE=${2:?}
WINE=${3:?}
export WINEDEBUG=-all

WORK=$(mktemp -d /tmp/muster-winl-XXXXXX)
LAUNCHER_PID=""
source "$(dirname "$0")/wine_test_lib.sh"
cleanup() {
  reap "$LAUNCHER_PID"
  rm -rf "$WORK"
}
trap cleanup EXIT
WORKER=$(winpath "$WORKER_EXE")

# Runs muster.exe with "$@" (120 s at most) into $WORK/$NAME.log; sets RC.
run() {
  local name=$1
  shift
  # --prefix-output: the checks tell the ranks' lines apart by [rankN]:.
  timeout 120 "$WINE" "$MUSTER_EXE" --standalone --nproc-per-node=2 --prefix-output "$@" \
    >"$WORK/$name.log" 2>&1
  RC=$?
  ((RC != 124)) || fail "$name: muster.exe did not end within 120 s"
}
# Lines a Windows worker writes end in CR LF: patterns allow the CR (a literal
# one; grep -E has no \r escape).
CR=$'\r'
expect_line() { # NAME REGEX: the log of case NAME has a line matching REGEX.
  grep -qE -- "$2" "$WORK/$1.log" || fail "$1: no line matching '$2'"
}

# --- 1. Two workers with the torchrun environment. --------------------------------------------
run success --no-python "$WORKER" --print-env
((RC == 0)) || fail "success: exit $RC, expected 0"
for r in 0 1; do
  p="^\[rank$r\]:"
  expect_line success "${p}env RANK=$r${CR}?\$"
  expect_line success "${p}env LOCAL_RANK=$r${CR}?\$"
  expect_line success "${p}env WORLD_SIZE=2${CR}?\$"
  expect_line success "${p}env LOCAL_WORLD_SIZE=2${CR}?\$"
  expect_line success "${p}env GROUP_RANK=0${CR}?\$"
  expect_line success "${p}env ROLE_RANK=$r${CR}?\$"
  expect_line success "${p}env MASTER_ADDR=(127\.0\.0\.1|localhost|[A-Za-z0-9.-]+)${CR}?\$"
  expect_line success "${p}env MASTER_PORT=[0-9]+${CR}?\$"
  expect_line success "${p}env TORCHELASTIC_RESTART_COUNT=0${CR}?\$"
  expect_line success "${p}env TORCHELASTIC_MAX_RESTARTS=0${CR}?\$"
  expect_line success "${p}env TORCHELASTIC_USE_AGENT_STORE=False${CR}?\$"
  expect_line success "${p}env TORCHELASTIC_RUN_ID=[^<]+${CR}?\$"
  expect_line success "${p}env TORCHELASTIC_ERROR_FILE=[^<]+${CR}?\$"
  expect_line success "${p}env OMP_NUM_THREADS=1${CR}?\$"
  expect_line success "${p}env MUSTER_STORE_ENDPOINT=[^<]+:[0-9]+${CR}?\$"
  expect_line success "${p}env MUSTER_STORE_PREFIX=[^<]+${CR}?\$"
  expect_line success "${p}env MUSTER_ROUND=[0-9]+${CR}?\$"
  expect_line success "${p}env MUSTER_STOP_EVENT=[^<]+${CR}?\$"
  expect_line success "${p}win_worker rank $r done"
done
echo "1. success: exit 0, both ranks saw the torchrun environment"

# --- 2. A failing worker is named with its exit code. -------------------------------------------
run exit3 --no-python "$WORKER" --fail-rank=1 --exit-code=3
((RC == 1)) || fail "exit3: exit $RC, expected 1 (the job failed)"
expect_line exit3 "FAILED"
expect_line exit3 "rank 1 \(local rank 1\) on .*: exited with code 3,"
echo "2. failing worker: exit 1, the summary names rank 1, exited with code 3"

# --- 3. A crash is named by its NTSTATUS. -------------------------------------------------------
run crash --no-python "$WORKER" --fail-rank=0 --crash
((RC == 1)) || fail "crash: exit $RC, expected 1"
expect_line crash "rank 0 \(local rank 0\) on .*: exited with code 0xC0000005 \(STATUS_ACCESS_VIOLATION"
echo "3. crashing worker: the summary names 0xC0000005 (STATUS_ACCESS_VIOLATION)"

# --- 4. --max-restarts=1: one restart, then success. -------------------------------------------
run restart --max-restarts=1 --no-python "$WORKER" --print-env --fail-rank=0 --exit-code=5 \
  --fail-restart-count=0
((RC == 0)) || fail "restart: exit $RC, expected 0 after one restart"
expect_line restart "^\[rank0\]:env TORCHELASTIC_RESTART_COUNT=0${CR}?\$"
expect_line restart "^\[rank0\]:env TORCHELASTIC_RESTART_COUNT=1${CR}?\$"
expect_line restart "^\[rank1\]:env TORCHELASTIC_RESTART_COUNT=1${CR}?\$"
expect_line restart "^\[rank0\]:env TORCHELASTIC_MAX_RESTARTS=1${CR}?\$"
expect_line restart "^\[rank0\]:win_worker rank 0 done"
echo "4. --max-restarts=1: rank 0 failed in attempt 0, the job restarted and succeeded"

# --- 5./6. The launcher ends while both workers hang: no worker is left. ----------------------
# Waits up to $1 s until both workers' heartbeat files ($2<rank>) exist.
wait_beats() {
  local deadline=$((SECONDS + $1))
  while ((SECONDS < deadline)); do
    [[ -s "${2}0" && -s "${2}1" ]] && return 0
    sleep 0.2
  done
  return 1
}
# Passes when neither worker's heartbeat file changes for 3 s, within $1 s.
beats_stopped() {
  local deadline=$((SECONDS + $1)) before after
  while ((SECONDS < deadline)); do
    before=$(cat "${2}0" "${2}1" 2>/dev/null)
    sleep 3
    after=$(cat "${2}0" "${2}1" 2>/dev/null)
    [[ "$before" == "$after" ]] && return 0
  done
  return 1
}
hang_case() { # NAME SIGNAL EXPECTED_RC
  local name=$1 sig=$2 want=$3 beat="$WORK/$1-beat" deadline
  "$WINE" "$MUSTER_EXE" --standalone --nproc-per-node=2 --no-python "$WORKER" --hang \
    --beat-file="$(winpath "$beat")" >"$WORK/$name.log" 2>&1 &
  LAUNCHER_PID=$!
  wait_beats 90 "$beat" || fail "$name: the workers wrote no heartbeat within 90 s"
  kill "-$sig" "$LAUNCHER_PID"
  deadline=$((SECONDS + 60))
  while kill -0 "$LAUNCHER_PID" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  kill -0 "$LAUNCHER_PID" 2>/dev/null && fail "$name: muster.exe still runs 60 s after SIG$sig"
  wait "$LAUNCHER_PID"
  local rc=$?
  LAUNCHER_PID=""
  [[ -z "$want" || "$rc" == "$want" ]] || fail "$name: muster.exe exited $rc, expected $want"
  beats_stopped 30 "$beat" || fail "$name: a worker still runs 30 s after the launcher ended"
  # Wine shows a Windows process's command line in ps: no win_worker with this run's files.
  local left
  left=$(pgrep -af -- "$(basename "$WORK")\\\\$name-beat") &&
    fail "$name: processes left: $left"
}
hang_case killed KILL ""
echo "5. launcher killed (SIGKILL): both workers are gone (kill-on-close job objects)"
hang_case interrupted INT 130
expect_line interrupted "SIGINT"
echo "6. launcher interrupted (SIGINT): it stopped both workers and exited 130"
echo "PASS"
