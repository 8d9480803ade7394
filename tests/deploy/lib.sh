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

# npm_ci_pinned FROM_DIR TO_DIR WHAT: installs the npm packages pinned by FROM_DIR's package.json and
# package-lock.json into TO_DIR (again only when the pins changed); skips naming WHAT when the
# registry is unreachable, fails on any other npm error. No browser is downloaded.
npm_ci_pinned() {
  local from=$1 to=$2 what=$3 sum
  sum=$(cat "$from/package.json" "$from/package-lock.json" | sha256sum | cut -d' ' -f1)
  [[ -f $to/.installed && $(cat "$to/.installed") == "$sum" ]] && return 0
  rm -rf "$to"
  mkdir -p "$to"
  cp "$from/package.json" "$from/package-lock.json" "$to/"
  if ! (cd "$to" && PUPPETEER_SKIP_DOWNLOAD=1 timeout 300 npm ci --no-audit --no-fund \
        --loglevel=error >"$to/npm.log" 2>&1); then
    cat "$to/npm.log"
    if grep -Eqi 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ECONNRESET|network|proxy' "$to/npm.log"; then
      rm -rf "$to"
      skip "the npm registry is unreachable: $what"
    fi
    fail "npm ci failed"
  fi
  echo "$sum" >"$to/.installed"
}
