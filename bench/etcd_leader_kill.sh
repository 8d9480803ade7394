#!/usr/bin/env bash
# etcd's own leader killed under replicated musterd (issue 35): 3 etcd members and R musterd
# replicas (default 3) on loopback, both cores loaded by 2 busy loops. Each run finds etcd's
# leader member (its maintenance status, as `etcdctl endpoint status -w json` prints it), kills
# it with -9, measures until a surviving member names a new leader, starts it again with its
# data, and lets the cluster settle. Per run:
#   etcd       kill -9 -> a survivor reports a new leader (polled every ~20 ms)
#   gap        musterd's leader: the longest time between two answered lease renewals, from its
#              log ("lease renewed after a gap of N ms", "confirmed its leadership again after a
#              gap of N ms"); "-" when no renewal failed or was late
#   shut       how long its leadership was unconfirmed (the gate shut: nothing acted on)
#   moved      whether musterd's leadership changed hands (PREFIX/leader's create revision)
# musterd's leadership must move 0 times: a lost etcd member changes nothing a job sees. A job
# of 2 agents x 2 workers (`muster --rdzv-endpoint=R1,R2,R3`) runs through every run; its
# workers must start once each (4 starts) and both agents exit 0 at the end (JOB=0: no job).
#
#   bash bench/etcd_leader_kill.sh [RUNS]      (default 20; REPLICAS=2|3, BUSY=2 busy loops)
#   MUSTERD_ARGS="--election-ttl=2s" bash bench/etcd_leader_kill.sh 20
#
# Writes bench/results/etcd_leader_kill.md (the table and a summary, with the command).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
replicas=${REPLICAS:-3}
busy=${BUSY:-2}
job=${JOB:-1}
settle=${SETTLE:-2}
root=$PWD
musterd=$root/build/bin/musterd
muster=$root/build/bin/muster
for b in "$musterd" "$root/build/bin/muster" /usr/bin/etcd /usr/bin/curl; do
  [[ -x $b ]] || { echo "missing $b (cmake --build build --target musterd; etcd-server, curl)" >&2; exit 1; }
done
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 -- "-$p" 2>/dev/null || kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap 'cleanup; rm -rf "$work"' EXIT
now_ms() { date +%s%3N; }
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# etcd: three members, etcd 3.4's default timing (100 ms heartbeat, 1 s election).
cluster=""
endpoints=""
for i in 0 1 2; do
  cport[$i]=$(free_port); pport[$i]=$(free_port)
  cluster+="${cluster:+,}e$i=http://127.0.0.1:${pport[$i]}"
  endpoints+="${endpoints:+,}http://127.0.0.1:${cport[$i]}"
done
start_member() {  # i
  setsid /usr/bin/etcd --name "e$1" --data-dir "$work/e$1" \
    --listen-client-urls "http://127.0.0.1:${cport[$1]}" --advertise-client-urls "http://127.0.0.1:${cport[$1]}" \
    --listen-peer-urls "http://127.0.0.1:${pport[$1]}" --initial-advertise-peer-urls "http://127.0.0.1:${pport[$1]}" \
    --initial-cluster "$cluster" --initial-cluster-state new --log-level warn >>"$work/etcd$1.log" 2>&1 &
  epid[$1]=$!
  pids+=($!)
}
# Member i's status through etcd's JSON gateway: "<its id> <the leader it knows>", empty when it
# does not answer within 300 ms.
status() {
  curl -s -m 0.3 -X POST -d '{}' "http://127.0.0.1:${cport[$1]}/v3/maintenance/status" 2>/dev/null |
    /usr/bin/python3 -c 'import json,sys
try:
  d = json.load(sys.stdin); print(d["header"]["member_id"], d.get("leader", "0"))
except Exception: pass'
}
healthy() { curl -s -m 0.5 "http://127.0.0.1:${cport[$1]}/health" 2>/dev/null | grep -q '"health":"true"'; }
etcd_leader() {  # the index of the member that leads, or -1
  local i s
  for i in 0 1 2; do
    s=$(status "$i")
    [[ -n $s ]] || continue
    read -r id lead <<<"$s"
    [[ $id == "$lead" ]] && { echo "$i"; return; }
  done
  echo -1
}
# PREFIX/leader's create revision and value (who leads musterd, and since when).
musterd_leader() {
  curl -s -m 1 -X POST -d "{\"key\":\"$(printf /muster/leader | base64)\"}" \
    "http://127.0.0.1:${cport[$1]}/v3/kv/range" 2>/dev/null |
    /usr/bin/python3 -c 'import base64,json,sys
try:
  kv = json.load(sys.stdin)["kvs"][0]; print(kv["create_revision"], base64.b64decode(kv["value"]).decode())
except Exception: print("none")'
}
for i in 0 1 2; do start_member "$i"; done
for _ in $(seq 150); do (($(etcd_leader) >= 0)) && break; sleep 0.2; done
(($(etcd_leader) >= 0)) || { echo "etcd did not elect a leader: $(tail -3 "$work"/etcd*.log)" >&2; exit 1; }

# musterd replicas.
for r in $(seq 0 $((replicas - 1))); do
  port[$r]=$(free_port)
  # shellcheck disable=SC2086
  setsid "$musterd" --listen="127.0.0.1:${port[$r]}" --etcd-endpoints="$endpoints" ${MUSTERD_ARGS:-} \
    >>"$work/musterd$r.log" 2>&1 &
  pids+=($!)
done
any_member() { local i; for i in 0 1 2; do healthy "$i" && { echo "$i"; return; }; done; echo 0; }
for _ in $(seq 150); do [[ $(musterd_leader "$(any_member)") != none ]] && grep -q " leads: loaded" "$work"/musterd*.log && break; sleep 0.2; done
grep -q " leads: loaded" "$work"/musterd*.log || { echo "no musterd leads: $(tail -3 "$work"/musterd*.log)" >&2; exit 1; }

# The job: 2 agents x 2 workers that log each start and run until the finish file appears.
starts=$work/starts
finish=$work/finish
agents=()
if ((job)); then
  rdzv=""
  for r in $(seq 0 $((replicas - 1))); do rdzv+="${rdzv:+,}127.0.0.1:${port[$r]}"; done
  cat >"$work/worker.sh" <<WORKER
#!/bin/bash
echo "start \$RANK \$\$" >>"$starts"
while [ ! -e "$finish" ]; do sleep 0.1; done
WORKER
  chmod +x "$work/worker.sh"
  for a in 0 1; do
    setsid env -u RANK -u WORLD_SIZE "$muster" --nnodes=2 --nproc-per-node=2 --max-restarts=0 \
      --rdzv-endpoint="$rdzv" --rdzv-id=etcdkill --no-python "$work/worker.sh" >>"$work/agent$a.log" 2>&1 &
    agents+=($!)
    pids+=($!)
  done
  for _ in $(seq 300); do [[ -f $starts ]] && (($(wc -l <"$starts") >= 4)) && break; sleep 0.2; done
  [[ -f $starts ]] && (($(wc -l <"$starts") >= 4)) || { echo "the job did not start: $(tail -5 "$work"/agent*.log)" >&2; exit 1; }
fi

# The load: busy loops on every core the machine has (2 here), as the issue's runs had.
for _ in $(seq "$busy"); do
  setsid bash -c 'while :; do :; done' &
  pids+=($!)
done
sleep 1

results=$work/results
: >"$results"
printf '%-4s %-8s %10s %10s %10s %-6s\n' run killed "etcd ms" "gap ms" "shut ms" moved >&2
for run in $(seq "$runs"); do
  l=$(etcd_leader)
  for _ in $(seq 50); do ((l >= 0)) && break; sleep 0.1; l=$(etcd_leader); done
  ((l >= 0)) || { echo "run $run: etcd has no leader" >&2; exit 1; }
  killed_id=$(status "$l" | cut -d' ' -f1)
  others=()
  for i in 0 1 2; do ((i != l)) && others+=("$i"); done
  before=$(musterd_leader "${others[0]}")
  declare -A offset=()
  for f in "$work"/musterd*.log; do offset[$f]=$(stat -c %s "$f"); done
  t0=$(now_ms)
  kill -9 "${epid[$l]}"
  wait "${epid[$l]}" 2>/dev/null || true
  etcd_ms=cap
  while (($(now_ms) - t0 < 30000)); do
    for i in "${others[@]}"; do
      s=$(status "$i")
      [[ -n $s ]] || continue
      lead=${s#* }
      if [[ $lead != 0 && $lead != "$killed_id" ]]; then etcd_ms=$(($(now_ms) - t0)); break 2; fi
    done
    sleep 0.02
  done
  # musterd confirms again (or gives up) within seconds of etcd's election.
  sleep "$settle"
  start_member "$l"
  for _ in $(seq 100); do healthy "$l" && break; sleep 0.1; done
  sleep "$settle"
  after=$(musterd_leader "${others[0]}")
  moved=no
  [[ $after == "$before" ]] || moved=yes
  gap=- shut=-
  for f in "$work"/musterd*.log; do
    new=$(tail -c +"$((offset[$f] + 1))" "$f")
    g=$(grep -o 'after a gap of [0-9]* ms' <<<"$new" | grep -o '[0-9]*' | sort -n | tail -1 || true)
    s=$(grep -o 'unconfirmed for [0-9]* ms' <<<"$new" | grep -o '[0-9]*' | sort -n | tail -1 || true)
    [[ -n $g && ($gap == - || $g -gt $gap) ]] && gap=$g
    [[ -n $s && ($shut == - || $s -gt $shut) ]] && shut=$s
    grep -q "lost the leadership" <<<"$new" && moved=yes
  done
  echo "$run e$l $etcd_ms $gap $shut $moved" >>"$results"
  printf '%-4s %-8s %10s %10s %10s %-6s\n' "$run" "e$l" "$etcd_ms" "$gap" "$shut" "$moved" >&2
done

worker_starts=- agents_ok=-
if ((job)); then
  worker_starts=$(wc -l <"$starts")
  touch "$finish"
  agents_ok=0
  for a in "${agents[@]}"; do
    if wait "$a"; then agents_ok=$((agents_ok + 1)); fi
  done
fi

stat() {  # column -> "median | p95 | max" over numeric values ("-" counts as 0 for gap/shut)
  awk -v k="$1" '$k != "cap" { print ($k == "-" ? 0 : $k) }' "$results" | sort -g | awk '{ v[NR] = $1 } END {
    n = NR; if (n == 0) { printf "- | - | -"; exit }
    med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    i = int(0.95 * (n - 1) + 0.999999) + 1; if (i > n) i = n
    printf "%d ms | %d ms | %d ms", med, v[i], v[n] }'
}
out=bench/results/etcd_leader_kill.md
mkdir -p bench/results
{
  echo "# REPLICAS=$replicas BUSY=$busy MUSTERD_ARGS=\"${MUSTERD_ARGS:-}\" bash bench/etcd_leader_kill.sh $runs"
  echo
  echo "$(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), etcd $(/usr/bin/etcd --version | head -1 | awk '{print $3}')"
  echo
  echo "| run | killed | etcd new leader | musterd longest gap | musterd unconfirmed | musterd leadership moved |"
  echo "|---:|---|---:|---:|---:|---|"
  while read -r r k e g s m; do echo "| $r | $k | $e ms | $g ms | $s ms | $m |"; done <"$results"
  echo
  echo "| | median | p95 | max |"
  echo "|---|---:|---:|---:|"
  echo "| etcd: kill -9 of its leader -> a new leader | $(stat 3) |"
  echo "| musterd: longest gap between answered renewals | $(stat 4) |"
  echo "| musterd: leadership unconfirmed (gate shut) | $(stat 5) |"
  echo
  echo "musterd's leadership moved $(awk '$6 == "yes"' "$results" | wc -l) times in $runs runs."
  if ((job)); then
    echo "The job (2 agents x 2 workers) through all runs: $worker_starts worker starts (4 = none restarted), $agents_ok of 2 agents exited 0."
  fi
} | tee "$out"
