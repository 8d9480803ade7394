#!/usr/bin/env bash
# The Store on a replicated leader (issue 25), against a single musterd and torch's TCPStore in the
# same run: Set, Get and Add ops/s from 1,000 concurrent clients (muster-store-bench over
# Store.Stream; bench/tcpstore_bench.py under Debian's torch 1.13). The replicated leader is a
# musterd with --etcd-endpoints over a 3-member etcd cluster on loopback (etcd 3.4's defaults):
# every Set and Add is acknowledged only after etcd committed it (group commits).
#
#   bash bench/store_replicated.sh [CLIENTS] [SECONDS]   (default 1000 clients, 5 s each)
#
# Writes bench/results/store-replicated.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/store_common.sh
store_bench_args "$@"
STORE_BENCH_HINT="; apt-get install etcd-server" store_bench_need "$musterd" "$bench" /usr/bin/etcd
log=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$log"
}
trap cleanup EXIT
source bench/etcd_cluster.sh
start_etcd_cluster "$log"
single=$(free_port) replicated=$(free_port) http=$(free_port)
"$musterd" --listen="127.0.0.1:$single" --log-level=warning 2>"$log/single.log" &
pids+=($!)
"$musterd" --listen="127.0.0.1:$replicated" --http-listen="127.0.0.1:$http" --log-level=warning \
  --etcd-endpoints="$endpoints" 2>"$log/replicated.log" &
pids+=($!)
start_tcpstore "$log"
pids+=("$tpid")
for _ in $(seq 300); do
  curl -s -m 0.3 "http://127.0.0.1:$http/readyz" 2>/dev/null | grep -q '^ready' && [[ -s $log/tcpstore.port ]] && break
  sleep 0.1
done
curl -s -m 0.3 "http://127.0.0.1:$http/readyz" | grep -q '^ready' ||
  { echo "the replicated musterd does not lead:" >&2; cat "$log/replicated.log" >&2; exit 1; }
tport=$(head -1 "$log/tcpstore.port")

res=bench/results/store-replicated.md
{
  echo "# bash bench/store_replicated.sh $clients $seconds ($(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
  echo
  echo "| op | single musterd ops/s | p50 | replicated leader ops/s | p50 | p99 | TCPStore ops/s | p50 | replicated / TCPStore | single / TCPStore |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
} >"$res"
for op in set get add; do
  s=$("$bench" --endpoint="127.0.0.1:$single" --clients="$clients" --op="$op" --seconds="$seconds")
  echo "single:     $s" >&2
  r=$("$bench" --endpoint="127.0.0.1:$replicated" --clients="$clients" --op="$op" --seconds="$seconds")
  echo "replicated: $r" >&2
  t=$(/usr/bin/python3 bench/tcpstore_bench.py clients "$tport" --clients="$clients" --op="$op" \
    --seconds="$seconds")
  echo "TCPStore:   $t" >&2
  so=$(field ops_per_s "$s"); ro=$(field ops_per_s "$r"); to=$(field ops_per_s "$t")
  echo "| $op | $so | $(field p50_us "$s") µs | $ro | $(field p50_us "$r") µs | $(field p99_us "$r") µs | $to | $(field p50_us "$t") µs | $(ratio "$ro" "$to") | $(ratio "$so" "$to") |" >>"$res"
done
echo >>"$res"
exec {hold}>&-
cat "$res"
