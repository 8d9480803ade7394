# Sourced by the wine test scripts (launcher_wine_test.sh, musterd_linux_agents_test.sh,
# linux_musterd_mixed_agents_test.sh, stacks_wine_test.sh) once $WORK is set:
#   fail REASON...   prints "FAIL: REASON", then the end of every $WORK/*.log under its name;
#                    exits 1
#   reap PID...      kill -9 and wait for each PID that still runs (empty ones are skipped)
#   winpath PATH     a Unix path as wine's Z: drive names it
#   wait_port_file FILE SECONDS
#                    waits up to SECONDS for FILE to hold a port number; prints it (status 1:
#                    none in time)
#   wineserver_running
#                    whether a wineserver already serves $WINEPREFIX (~/.wine): a script that
#                    finds none ends, at its end, the one its programs start (wineserver -k)
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
wait_port_file() {
  local deadline=$((SECONDS + $2))
  while ((SECONDS < deadline)); do
    if [[ -s "$1" ]] && grep -qE '^[0-9]+' "$1"; then
      tr -d '\r\n' <"$1"
      return 0
    fi
    sleep 0.2
  done
  return 1
}
wineserver_running() {
  # Its socket directory is named after the prefix's device and inode.
  local prefix=${WINEPREFIX:-$HOME/.wine}
  [[ -d "$prefix" ]] || return 1
  [[ -S $(printf '/tmp/.wine-%d/server-%x-%x/socket' "$(id -u)" "0x$(stat -c %D "$prefix")" \
    "$(stat -c %i "$prefix")") ]]
}
