# Sourced by the Store benchmarks (bench/store.sh, bench/store_replicated.sh), from the repository
# root under `set -euo pipefail`:
#   store_bench_args [CLIENTS] [SECONDS]
#                                      sets $clients (default 1000) and $seconds (5), and the
#                                      binaries $musterd and $bench
#   store_bench_need BIN...            exits 1 naming the first missing BIN (and how to build it),
#                                      or a /usr/bin/python3 without torch (the TCPStore peer)
#   start_tcpstore DIR                 starts TCPStore's server (bench/tcpstore_bench.py); sets
#                                      $tpid; its port appears in DIR/tcpstore.port; it lives
#                                      while fd $hold stays open
#   field NAME LINE, ratio A B         a NAME=value of a bench line; A/B as "1.23×" ("-" if B is 0)
store_bench_args() {
  clients=${1:-1000}
  seconds=${2:-5}
  musterd=build/bin/musterd
  bench=build/bin/muster-store-bench
}
store_bench_need() {
  local b hint="cmake --build build --target musterd muster-store-bench"
  for b in "$@"; do
    [[ -x $b ]] || { echo "missing $b: $hint${STORE_BENCH_HINT:-}" >&2; exit 1; }
  done
  /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null ||
    { echo "torch missing for /usr/bin/python3: apt-get install python3-torch" >&2; exit 1; }
}
start_tcpstore() {
  mkfifo "$1/tcpstore.in"
  /usr/bin/python3 bench/tcpstore_bench.py server <"$1/tcpstore.in" >"$1/tcpstore.port" &
  tpid=$!
  exec {hold}>"$1/tcpstore.in"  # the TCPStore server lives while this stays open
}
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" <<<"$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f×", a / b; else print "-" }'; }
