#!/usr/bin/env bash
# Store throughput: Set, Get and Add operations per second from 1,000 concurrent clients, for
# musterd's Store service (muster-store-bench) and torch's TCPStore (bench/tcpstore_bench.py,
# Debian's torch 1.13 under /usr/bin/python3), measured in the same run, alternating.
#
#   bash bench/store.sh [CLIENTS] [SECONDS]      (default 1000 clients, 5 s per measurement)
#
# Each client issues one operation at a time. set: its own keys; get: a key set beforehand;
# add: one counter shared by all (a barrier's case). musterd is measured twice per op: over
# Store.Stream (as GrpcStore talks) and with one unary call per op (the older protocol).
# Writes bench/results/store.md.
#
# Environment:
#   MUSTERD_ARGS      extra flags for the musterd this script starts (e.g. a replicated
#                     leader's --etcd-endpoints=...)
#   MUSTERD_ENDPOINT  HOST:PORT of a musterd already running: measure that one, start none
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/store_common.sh
store_bench_args "$@"
need=("$bench")
[[ -z ${MUSTERD_ENDPOINT:-} ]] && need+=("$musterd")
store_bench_need "${need[@]}"
log=$(mktemp -d)
cleanup() {
  [[ -n ${mpid:-} ]] && kill "$mpid" 2>/dev/null
  [[ -n ${tpid:-} ]] && kill "$tpid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$log"
}
trap cleanup EXIT

if [[ -z ${MUSTERD_ENDPOINT:-} ]]; then
  # shellcheck disable=SC2086  # MUSTERD_ARGS is a list of flags
  "$musterd" --listen=127.0.0.1:0 --port-file="$log/port" --log-level=warning \
    ${MUSTERD_ARGS:-} 2>"$log/musterd.log" &
  mpid=$!
fi
start_tcpstore "$log"
for _ in $(seq 300); do
  [[ ( -n ${MUSTERD_ENDPOINT:-} || -s $log/port ) && -s $log/tcpstore.port ]] && break
  sleep 0.1
done
if [[ -n ${MUSTERD_ENDPOINT:-} ]]; then
  mendpoint=$MUSTERD_ENDPOINT
else
  [[ -s $log/port ]] || { echo "musterd did not start:" >&2; cat "$log/musterd.log" >&2; exit 1; }
  mendpoint=127.0.0.1:$(cat "$log/port")
fi
tport=$(head -1 "$log/tcpstore.port")
echo "musterd at $mendpoint, TCPStore on $tport; $clients clients, $seconds s each" >&2

res=bench/results/store.md
{
  echo "| op | musterd stream ops/s | p50 | p99 | musterd unary ops/s | TCPStore ops/s | p50 | p99 | stream / TCPStore | unary / TCPStore |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
} >"$res"
for op in set get add; do
  m=$("$bench" --endpoint="$mendpoint" --clients="$clients" --op="$op" --seconds="$seconds" \
    --mode=stream)
  echo "muster:   $m" >&2
  u=$("$bench" --endpoint="$mendpoint" --clients="$clients" --op="$op" --seconds="$seconds" \
    --mode=unary)
  echo "muster:   $u" >&2
  t=$(/usr/bin/python3 bench/tcpstore_bench.py clients "$tport" --clients="$clients" --op="$op" \
    --seconds="$seconds")
  echo "TCPStore: $t" >&2
  mo=$(field ops_per_s "$m")
  uo=$(field ops_per_s "$u")
  to=$(field ops_per_s "$t")
  echo "| $op | $mo | $(field p50_us "$m") µs | $(field p99_us "$m") µs | $uo | $to | $(field p50_us "$t") µs | $(field p99_us "$t") µs | $(ratio "$mo" "$to") | $(ratio "$uo" "$to") |" >>"$res"
done
exec {hold}>&-
cat "$res"
