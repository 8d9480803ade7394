# Shared by the deploy tests (sourced). Tests print what they check; a test that cannot run here
# says why and exits 77, which ctest reports as skipped (SKIP_RETURN_CODE), never as passed.
set -euo pipefail

skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAIL: $*"
  exit 1
}
step() { echo "--- $*"; }

# A fresh scratch directory, removed on exit (with the processes the test started: see reap).
scratch() {
  SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/muster-deploy.XXXXXX")
  trap 'reap; rm -rf "$SCRATCH"' EXIT
}

# Background processes to kill on exit: their pids (each leads its own process group).
PIDS=()
reap() {
  local pid
  for pid in "${PIDS[@]:-}"; do
    [[ -n $pid ]] || continue
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}

# wait_for_file FILE SECONDS: until FILE is non-empty; fails at the deadline.
wait_for_file() {
  local file=$1 deadline=$((SECONDS + $2))
  until [[ -s $file ]]; do
    ((SECONDS < deadline)) || fail "$file did not appear within $2 s"
    sleep 0.05
  done
}

# expect_exit CODE LOG WHAT CMD...: runs CMD with its output to LOG (printed after), and fails
# naming WHAT unless it exits CODE.
expect_exit() {
  local want=$1 log=$2 what=$3 code=0
  shift 3
  "$@" >"$log" 2>&1 || code=$?
  cat "$log"
  [[ $code == "$want" ]] || fail "$what: exit $code, expected $want"
}
