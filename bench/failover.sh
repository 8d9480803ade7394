#!/usr/bin/env bash
# Failover of replicated musterd (issue 25): two musterd replicas over a 3-member etcd cluster on
# loopback, and one job of 2 agents x 1 worker (bench/recovery_worker.sh) that runs through every
# failover. Each run stops the leader and measures, from that moment:
#   leading   the other replica answers /readyz 200 (it leads and serves)
#   adopted   the new leader re-adopted the job's running round (every agent back, no restart)
# and whether any worker was started again (it must not be). The stopped replica is then brought
# back (kill -9: started again; SIGSTOP: SIGCONT, it exits 75 by itself, started again) as the
# next run's standby.
#
#   bash bench/failover.sh [RUNS] [CASES]     (default 20 runs of each of "kill stop")
#
# Defaults: musterd's replica defaults (election TTL 2 s, leadership validity 1 s, renewals every
# 200 ms, standby probes every 100 ms) and etcd 3.4's (100 ms heartbeat, 1 s election).
# Writes bench/results/failover.md.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
cases=${2:-kill stop}
cap=${CAP:-30}
root=$PWD
muster=$root/build/bin/muster
musterd=$root/build/bin/musterd
worker=$root/bench/recovery_worker.sh
for b in "$muster" "$musterd" /usr/bin/etcd /usr/bin/etcdctl; do
  [[ -x $b ]] || { echo "missing $b (cmake --build build --target muster musterd; etcd-server etcd-client)" >&2; exit 1; }
done
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill -9 -- "-$p" 2>/dev/null || kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap 'cleanup; rm -rf "$work"' EXIT
now() { date +%s.%N; }
since() { awk -v a="$(now)" -v t="$1" 'BEGIN { printf "%.3f", a - t }'; }

# etcd: three members on loopback.
source "$root/bench/etcd_cluster.sh"
start_etcd_cluster "$work"

# Two replicas, each with a gRPC and an HTTP port of its own.
for r in 0 1; do port[$r]=$(free_port); http[$r]=$(free_port); done
rdzv="127.0.0.1:${port[0]},127.0.0.1:${port[1]}"
start_replica() {  # r
  setsid "$musterd" --listen="127.0.0.1:${port[$1]}" --http-listen="127.0.0.1:${http[$1]}" \
    --etcd-endpoints="$endpoints" >>"$work/musterd$1.log" 2>&1 &
  rpid[$1]=$!
  pids+=($!)
}
ready() { curl -s -m 0.3 "http://127.0.0.1:${http[$1]}/readyz" 2>/dev/null | grep -q '^ready'; }
leader() { ready 0 && { echo 0; return; }; ready 1 && { echo 1; return; }; echo -1; }
start_replica 0; start_replica 1
for _ in $(seq 200); do [[ $(leader) != -1 ]] && break; sleep 0.05; done

# The job: two agents that follow the leader.
id=failover-$$
for n in a b; do
  REC_DIR=$work REC_NODE=$n setsid "$muster" --nnodes=2 --nproc-per-node=1 --rdzv-endpoint="$rdzv" \
    --rdzv-id="$id" --max-restarts=100 --no-python "$worker" >"$work/agent.$n.log" 2>&1 &
  pids+=($!)
done
starts() { ls "$work"/start.* 2>/dev/null | wc -l; }
for _ in $(seq 600); do (($(starts) >= 2)) && break; sleep 0.05; done
(($(starts) >= 2)) || { echo "the job did not start:"; tail -5 "$work"/agent.*.log "$work"/musterd*.log; exit 1; }
sleep 1

results=$work/results
: >"$results"
for c in $cases; do
  for i in $(seq "$runs"); do
    l=$(leader)
    if ((l < 0)); then echo "run $c $i: no leader" >&2; echo "$c cap cap no" >>"$results"; continue; fi
    o=$((1 - l))
    adopted_before=$(grep -c "re-adopted" "$work/musterd$o.log" 2>/dev/null || true)
    before=$(starts)
    t0=$(now)
    if [[ $c == kill ]]; then kill -9 "${rpid[$l]}"; else kill -STOP "${rpid[$l]}"; fi
    lead=cap adopt=cap
    while awk -v a="$(since "$t0")" -v c="$cap" 'BEGIN { exit !(a < c) }'; do
      [[ $lead == cap ]] && ready "$o" && lead=$(since "$t0")
      if [[ $adopt == cap ]] && (($(grep -c "re-adopted" "$work/musterd$o.log" 2>/dev/null || true) > adopted_before)); then
        adopt=$(since "$t0")
      fi
      [[ $lead != cap && $adopt != cap ]] && break
      sleep 0.01
    done
    # Bring the stopped replica back as the next standby.
    if [[ $c == stop ]]; then
      kill -CONT "${rpid[$l]}"
      for _ in $(seq 100); do kill -0 "${rpid[$l]}" 2>/dev/null || break; sleep 0.05; done
    fi
    kill -9 "${rpid[$l]}" 2>/dev/null || true
    wait "${rpid[$l]}" 2>/dev/null || true
    sleep 0.5
    kept=yes
    (($(starts) == before)) || kept=no
    echo "$c $lead $adopt $kept" >>"$results"
    echo "run $c $i: leading after $lead s, round adopted after $adopt s, workers kept: $kept" >&2
    start_replica "$l"
    for _ in $(seq 100); do grep -q "stands by" "$work/musterd$l.log" && break; sleep 0.05; done
    sleep 1
  done
done

stat() {  # case column -> "median | p99"
  awk -v c="$1" -v k="$2" '$1 == c && $k != "cap" { print $k }' "$results" | sort -g | awk '{ v[NR] = $1 } END {
    n = NR; if (n == 0) { printf "- | -"; exit }
    med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    i = int(0.99 * (n - 1) + 0.999999) + 1; if (i > n) i = n
    printf "%.3f s | %.3f s", med, v[i] }'
}
out=bench/results/failover.md
{
  echo "# bash bench/failover.sh $runs \"$cases\" ($(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
  echo
  echo "| leader | leading: median | p99 | round re-adopted: median | p99 | workers kept |"
  echo "|---|---:|---:|---:|---:|---:|"
  for c in $cases; do
    name=$([[ $c == kill ]] && echo "kill -9" || echo "SIGSTOP")
    kept=$(awk -v c="$c" '$1 == c && $4 == "yes"' "$results" | wc -l)
    total=$(awk -v c="$c" '$1 == c' "$results" | wc -l)
    echo "| $name | $(stat "$c" 2) | $(stat "$c" 3) | $kept of $total |"
  done
  echo
  echo "Job: 2 agents x 1 worker (--rdzv-endpoint=A,B), running through all $((runs * $(wc -w <<<"$cases"))) failovers;"
  echo "worker starts in total: $(starts) (2 means none restarted)."
} | tee "$out"
