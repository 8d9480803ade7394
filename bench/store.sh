#!/usr/bin/env bash
# Store throughput: Set, Get and Add operations per second from 1,000 concurrent clients, for
# musterd's Store service (muster-store-bench) and torch's TCPStore (bench/tcpstore_bench.py,
# Debian's torch 1.13 under /usr/bin/python3), measured in the same run, alternating.
#
#   bash bench/store.sh [CLIENTS] [SECONDS]      (default 1000 clients, 5 s per measurement)
#
# Each client issues one operation at a time. set: its own keys; get: a key set beforehand;
# add: one counter shared by all (a barrier's case). Writes bench/results/store.md.
set -euo pipefail
cd "$(dirname "$0")/.."
clients=${1:-1000}
seconds=${2:-5}
musterd=build/bin/musterd
bench=build/bin/muster-store-bench
for b in "$musterd" "$bench"; do
  [[ -x $b ]] || { echo "missing $b: cmake --build build --target musterd muster-store-bench" >&2; exit 1; }
done
/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null ||
  { echo "torch missing for /usr/bin/python3: apt-get install python3-torch" >&2; exit 1; }
log=$(mktemp -d)
cleanup() {
  [[ -n ${mpid:-} ]] && kill "$mpid" 2>/dev/null
  [[ -n ${tpid:-} ]] && kill "$tpid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$log"
}
trap cleanup EXIT

"$musterd" --listen=127.0.0.1:0 --port-file="$log/port" --log-level=warning 2>"$log/musterd.log" &
mpid=$!
mkfifo "$log/tcpstore.in"
/usr/bin/python3 bench/tcpstore_bench.py server <"$log/tcpstore.in" >"$log/tcpstore.port" &
tpid=$!
exec {hold}>"$log/tcpstore.in"  # the TCPStore server lives while this stays open
for _ in $(seq 300); do [[ -s $log/port && -s $log/tcpstore.port ]] && break; sleep 0.1; done
mport=$(cat "$log/port")
tport=$(head -1 "$log/tcpstore.port")
echo "musterd on $mport, TCPStore on $tport; $clients clients, $seconds s each" >&2

res=bench/results/store.md
{
  echo "| op | musterd Store ops/s | p50 | p99 | TCPStore ops/s | p50 | p99 | musterd / TCPStore |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
} >"$res"
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" <<<"$2"; }
for op in set get add; do
  m=$("$bench" --endpoint="127.0.0.1:$mport" --clients="$clients" --op="$op" --seconds="$seconds")
  echo "muster:   $m" >&2
  t=$(/usr/bin/python3 bench/tcpstore_bench.py clients "$tport" --clients="$clients" --op="$op" \
    --seconds="$seconds")
  echo "TCPStore: $t" >&2
  mo=$(field ops_per_s "$m")
  to=$(field ops_per_s "$t")
  ratio=$(awk -v a="$mo" -v b="$to" 'BEGIN { if (b > 0) printf "%.1f×", a / b; else print "-" }')
  echo "| $op | $mo | $(field p50_us "$m") µs | $(field p99_us "$m") µs | $to | $(field p50_us "$t") µs | $(field p99_us "$t") µs | $ratio |" >>"$res"
done
exec {hold}>&-
cat "$res"
