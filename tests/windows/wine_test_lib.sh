# Sourced by the wine test scripts (launcher_wine_test.sh, musterd_linux_agents_test.sh,
# linux_musterd_mixed_agents_test.sh) once $WORK is set:
#   fail REASON...   prints "FAIL: REASON", then the end of every $WORK/*.log under its name;
#                    exits 1
#   reap PID...      kill -9 and wait for each PID that still runs (empty ones are skipped)
#   winpath PATH     a Unix path as wine's Z: drive names it
fail() {
  echo "FAIL: $*"
  compgen -G "$WORK/*.log" >/dev/null && tail -v -n 60 "$WORK"/*.log
  exit 1
}
reap() {
  local p
  for p in "$@"; do
    if [[ -n $p ]] && kill -0 "$p" 2>/dev/null; then
      kill -9 "$p" 2>/dev/null
      wait "$p" 2>/dev/null
    fi
  done
}
winpath() { printf 'Z:%s' "${1//\//\\}"; }
