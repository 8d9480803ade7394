#!/usr/bin/env bash
# Recovery: how fast the launcher reacts, on loopback, with real agents and workers
# (bench/recovery_worker.sh: records its start and end, sleeps), for muster and torchrun in the
# same run. Each case runs RUNS times (default 20) per launcher; median and p99 are printed.
#
#   bash bench/recovery.sh [RUNS] [TORCHRUN_RUNS]
#
# Cases (a "node" is an agent and its one worker, in their own session):
#   agent_killed    3 nodes (--nnodes=2:3, default --rdzv-conf). kill -9 of one node's agent and
#                   worker -> both survivors' new workers running.
#   worker_exit     2 nodes (--nnodes=2). One worker exits 1 -> the other node's worker stopped.
#   server_restart  2 nodes. musterd killed -9 and started again on its port -> both agents back
#                   in a formed round (the new musterd re-adopts the running round the agents
#                   claim, so their workers keep running). torchrun's c10d equivalent: its TCPStore server (an external one, so that
#                   no agent hosts it) killed and restarted; the time reported is until its agents
#                   have exited (they do not reconnect: the job is lost).
#   train_node_lost 3 nodes of 2 `train` workers (--nnodes=2:3, --step-ms=10, --timestamps), muster
#                   only, its two recovery modes in the same run: kill -9 of one node's agent and
#                   workers -> all 4 survivors' first successful collective on the new world
#                   (train's `round ready: rank R of 4 at T`, after its state broadcast).
#                   --recovery=in-place: the same processes, after Recover() (their `recovered:
#                   ... in N ms` lines are summarised too); --recovery=restart: new processes,
#                   from exec to their first collective.
# CASES="train_node_lost" (a space-separated list) runs only those cases.
# Each wait is capped at CAP seconds (default 30); a capped run counts as "no recovery".
# torchrun is Debian's (/usr/bin/torchrun, torch 1.13, c10d backend), with -r 2 -t 2 (its default
# redirects crash on Python 3.11) and otherwise its defaults (monitor interval 5 s).
# Writes bench/results/recovery.md (and recovery_inplace.md for train_node_lost).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
truns=${2:-$runs}
cap=${CAP:-30}
root=$PWD
muster=$root/build/bin/muster
train=$root/build/bin/train
cases=${CASES:-agent_killed worker_exit server_restart train_node_lost}
musterd=$root/build/bin/musterd
worker=$root/bench/recovery_worker.sh
torchrun=/usr/bin/torchrun
need=("$muster" "$musterd" "$train")
[[ $cases == train_node_lost ]] || need+=("$torchrun")
for b in "${need[@]}"; do
  [[ -x $b ]] || { echo "missing $b (cmake --build build --target muster musterd train; python3-torch)" >&2; exit 1; }
done
work=$(mktemp -d)
groups=()
server_pid=""
cleanup() {
  for g in "${groups[@]}"; do kill -9 -- "-$g" 2>/dev/null || true; done
  [[ -n $server_pid ]] && kill -9 "$server_pid" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap 'cleanup; rm -rf "$work"' EXIT

now() { date +%s.%N; }
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# A rendezvous server on a free port: musterd for muster, a bare TCPStore for torchrun.
start_server() {  # launcher port log
  if [[ $1 == muster* ]]; then
    "$musterd" --listen="127.0.0.1:$2" 2>>"$3" &
  else
    /usr/bin/python3 - "$2" >>"$3" 2>&1 <<'PY' &
import datetime, sys, time, torch.distributed as d
s = d.TCPStore("127.0.0.1", int(sys.argv[1]), None, True, datetime.timedelta(seconds=600), wait_for_workers=False)
print("serving", flush=True)
while True: time.sleep(3600)
PY
  fi
  server_pid=$!
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$2") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "the $1 rendezvous server did not start: $(tail -3 "$3")" >&2
  return 1
}

# One node: an agent in its own session (kill -- -PGID ends agent and worker). Prints the pgid.
start_node() {  # launcher node nnodes port id dir
  local l=$1 n=$2 nn=$3 port=$4 id=$5 dir=$6
  if [[ $l == muster ]]; then
    REC_DIR=$dir REC_NODE=$n setsid "$muster" --nnodes="$nn" --nproc-per-node=1 \
      --rdzv-backend=c10d --rdzv-endpoint="127.0.0.1:$port" --rdzv-id="$id" --max-restarts=3 \
      --no-python "$worker" >"$dir/agent.$n.log" 2>&1 &
  else
    REC_DIR=$dir REC_NODE=$n setsid "$torchrun" --nnodes="$nn" --nproc_per_node=1 \
      --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$port" --rdzv_id="$id" --max_restarts=3 \
      -r 2 -t 2 --no_python "$worker" >"$dir/agent.$n.log" 2>&1 &
  fi
  echo $!
}

# One node of two train workers under muster --recovery=MODE. Prints the pgid.
start_train_node() {  # mode node port id dir
  local mode=$1 n=$2 port=$3 id=$4 dir=$5
  setsid "$muster" --nnodes=2:3 --nproc-per-node=2 --rdzv-backend=c10d \
    --rdzv-endpoint="127.0.0.1:$port" --rdzv-id="$id" --max-restarts=3 --recovery="$mode" \
    --no-python "$train" --epochs=1000000 --step-ms=10 --timestamps >"$dir/agent.$n.log" 2>&1 &
  echo $!
}
# How many train workers print `round ready: ... of W` in the nodes' logs after t0.
ready_count() {  # dir world t0 nodes...
  local dir=$1 w=$2 t0=$3 n
  shift 3
  for n in "$@"; do cat "$dir/agent.$n.log"; done 2>/dev/null |
    awk -v w="$w" -v t0="$t0" '/round ready: rank [0-9]+ of / {
      for (i = 1; i <= NF; i++) if ($i == "of") of = $(i + 1); else if ($i == "at") at = $(i + 1)
      if (of == w && at > t0) c++ } END { print c + 0 }'
}
# Waits until `count` train workers are ready on a world of W after t0; prints the seconds from
# t0 to the last of them, or "cap".
wait_ready() {  # dir world count t0 nodes...
  local dir=$1 w=$2 count=$3 t0=$4 deadline
  shift 4
  deadline=$(awk -v t="$t0" -v c="$cap" 'BEGIN { printf "%d", t + c }')
  while (($(date +%s) < deadline)); do
    if (($(ready_count "$dir" "$w" "$t0" "$@") >= count)); then
      for n in "$@"; do cat "$dir/agent.$n.log"; done |
        awk -v w="$w" -v t0="$t0" '/round ready: rank [0-9]+ of / {
          for (i = 1; i <= NF; i++) if ($i == "of") of = $(i + 1); else if ($i == "at") at = $(i + 1)
          if (of == w && at > t0 && at > last) last = at } END { printf "%.3f\n", last - t0 }'
      return
    fi
    sleep 0.01
  done
  echo cap
}

# Whether node n has a live worker.
running() {  # dir node
  local f pid
  for f in "$1"/start."$2".*; do
    [[ -e $f ]] || continue
    pid=${f##*.}
    [[ -e $1/end.$2.$pid ]] && continue
    kill -0 "$pid" 2>/dev/null && return 0
  done
  return 1
}
wait_running() {  # dir timeout nodes...
  local dir=$1 deadline n ok
  deadline=$(($(date +%s) + $2))
  shift 2
  while (($(date +%s) < deadline)); do
    ok=1
    for n in "$@"; do running "$dir" "$n" || { ok=0; break; }; done
    ((ok)) && return 0
    sleep 0.05
  done
  return 1
}
# The earliest marker time of `kind` (start/end) for node n after t0, or nothing.
first_after() {  # dir kind node t0
  cat "$1/$2.$3".* 2>/dev/null | awk -v t0="$4" '$1 > t0' | sort -g | head -1
}
# Waits until every node has a `kind` marker after t0; prints the seconds from t0 to the last of
# them, or "cap".
wait_markers() {  # dir kind t0 nodes...
  local dir=$1 kind=$2 t0=$3 deadline t worst n
  shift 3
  deadline=$(awk -v t="$t0" -v c="$cap" 'BEGIN { printf "%d", t + c }')
  while (($(date +%s) < deadline)); do
    worst=0
    for n in "$@"; do
      t=$(first_after "$dir" "$kind" "$n" "$t0")
      [[ -n $t ]] || { worst=""; break; }
      worst=$(awk -v a="$worst" -v b="$t" 'BEGIN { print (b > a ? b : a) }')
    done
    [[ -n $worst ]] && { awk -v a="$worst" -v t="$t0" 'BEGIN { printf "%.3f\n", a - t }'; return; }
    sleep 0.01
  done
  echo cap
}
teardown() {
  local g
  for g in "${groups[@]}"; do kill -TERM -- "-$g" 2>/dev/null || true; done
  sleep 0.3
  for g in "${groups[@]}"; do kill -9 -- "-$g" 2>/dev/null || true; done
  groups=()
  [[ -n $server_pid ]] && { kill -9 "$server_pid" 2>/dev/null || true; }
  server_pid=""
  wait 2>/dev/null || true
}

run_case() {  # launcher case i
  local l=$1 c=$2 i=$3 dir=$work/$1-$2-$3 port id t0 r
  mkdir -p "$dir"
  port=$(free_port)
  id=rec-$c-$i-$$
  start_server "$l" "$port" "$dir/server.log" || { echo error; return; }
  case $c in
    train_node_lost)
      local mode=${l#muster-} ts
      ts=$(now)
      for n in a b c; do groups+=("$(start_train_node "$mode" $n "$port" "$id" "$dir")"); done
      if [[ $(wait_ready "$dir" 6 6 "$ts" a b c) == cap ]]; then teardown; echo error; return; fi
      sleep 1
      t0=$(now)
      kill -9 -- "-${groups[2]}"
      r=$(wait_ready "$dir" 4 4 "$t0" a b)
      # In place: the survivors' own measure, failure to first collective.
      [[ $mode == in-place ]] && cat "$dir"/agent.[ab].log |
        sed -n 's/.*recovered: rank [0-9]* of 4 .* in \([0-9]*\) ms.*/\1/p' |
        sort -n | tail -1 | awk '{ printf "%.3f\n", $1 / 1000 }' >>"$work/$l-$c.self"
      ;;
    agent_killed)
      for n in a b c; do groups+=("$(start_node "$l" $n 2:3 "$port" "$id" "$dir")"); done
      if ! wait_running "$dir" 90 a b c; then teardown; echo error; return; fi
      sleep 1
      t0=$(now)
      kill -9 -- "-${groups[2]}"
      r=$(wait_markers "$dir" start "$t0" a b)
      ;;
    worker_exit)
      for n in a b; do groups+=("$(start_node "$l" $n 2 "$port" "$id" "$dir")"); done
      if ! wait_running "$dir" 90 a b; then teardown; echo error; return; fi
      sleep 1
      touch "$dir/exit.a"
      for _ in $(seq 500); do [[ -e $dir/exit.a.done ]] && break; sleep 0.01; done
      t0=$(cat "$dir/exit.a.done" 2>/dev/null || now)
      r=$(wait_markers "$dir" end "$t0" b)
      ;;
    server_restart)
      for n in a b; do groups+=("$(start_node "$l" $n 2 "$port" "$id" "$dir")"); done
      if ! wait_running "$dir" 90 a b; then teardown; echo error; return; fi
      sleep 1
      t0=$(now)
      kill -9 "$server_pid"
      wait "$server_pid" 2>/dev/null || true
      start_server "$l" "$port" "$dir/server2.log" || { teardown; echo error; return; }
      r=cap
      local deadline
      deadline=$(awk -v t="$t0" -v c="$cap" 'BEGIN { printf "%d", t + c }')
      while (($(date +%s) < deadline)); do
        if [[ $l == muster ]]; then
          grep -qE "round [0-9]+ (ready|re-adopted)" "$dir/server2.log" 2>/dev/null && { r=$(awk -v a="$(now)" -v t="$t0" 'BEGIN { printf "%.3f", a - t }'); break; }
        else
          local alive=0 g
          for g in "${groups[@]}"; do kill -0 "$g" 2>/dev/null && alive=1; done
          ((alive)) || { r=$(awk -v a="$(now)" -v t="$t0" 'BEGIN { printf "%.3f", a - t }'); break; }
        fi
        sleep 0.02
      done
      # Did the workers survive (muster: the round re-formed as it was)?
      if [[ $l == muster && $r != cap ]] && [[ -z $(first_after "$dir" start a "$t0") ]]; then
        echo kept >>"$work/$l-$c.kept"
      fi
      ;;
  esac
  teardown
  echo "$r"
}

summary() {  # file -> "median | p99 | n ok of m"
  local m
  m=$(wc -l <"$1")
  grep -vE '^(cap|error)$' "$1" | sort -g | awk -v m="$m" '{ v[NR] = $1 } END {
    n = NR; if (n == 0) { printf "- | - | 0 of %d\n", m; exit }
    med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    i = int(0.99 * (n - 1) + 0.999999) + 1; if (i > n) i = n
    printf "%.3f s | %.3f s | %d of %d\n", med, v[i], n, m }'
}

# The machine's load (1, 5, 15 min), printed with the results: figures from a shared machine mean
# little without it.
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
launchers() {  # case
  if [[ $1 == train_node_lost ]]; then echo muster-in-place muster-restart; else echo muster torchrun; fi
}
for c in $cases; do
  for l in $(launchers "$c"); do
    n=$runs
    [[ $l == torchrun ]] && n=$truns
    : >"$work/$l-$c.txt"
    for i in $(seq "$n"); do
      r=$(run_case "$l" "$c" "$i")
      echo "$l $c run $i: $r" >&2
      echo "$r" >>"$work/$l-$c.txt"
      # A launcher that never recovers in two runs will not in twenty: say so and move on.
      if ((i == 2)) && [[ $(grep -c '^cap$' "$work/$l-$c.txt") == 2 ]]; then break; fi
    done
  done
done

if [[ " $cases " == *" train_node_lost "* ]]; then
  {
    echo "| node lost (3 nodes x 2 train workers) | median | p99 | recovered in time (of runs) |"
    echo "|---|---:|---:|---:|"
    echo "| --recovery=in-place: kill -9 -> 4 survivors' first collective on the new world | $(summary "$work/muster-in-place-train_node_lost.txt") |"
    [[ -f $work/muster-in-place-train_node_lost.self ]] &&
      echo "| --recovery=in-place, the workers' own \`recovered: ... in N ms\` (slowest of 4) | $(summary "$work/muster-in-place-train_node_lost.self") |"
    echo "| --recovery=restart: kill -9 -> 4 new processes' first collective | $(summary "$work/muster-restart-train_node_lost.txt") |"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $runs runs per mode; load average (1, 5, 15 min) at the start $load_start, at the end $(cut -d' ' -f1-3 /proc/loadavg)."
  } >bench/results/recovery_inplace.md
  cat bench/results/recovery_inplace.md
  [[ $cases == train_node_lost ]] && exit 0
fi

res=bench/results/recovery.md
{
  echo "| case | launcher | median | p99 | recovered in time (of runs) |"
  echo "|---|---|---:|---:|---:|"
  for c in $cases; do
    [[ $c == train_node_lost ]] && continue
    for l in muster torchrun; do
      echo "| $c | $l | $(summary "$work/$l-$c.txt") |"
    done
  done
  [[ -f $work/muster-server_restart.kept ]] &&
    echo -e "\nmuster server_restart: workers kept running (no restart) in $(wc -l <"$work/muster-server_restart.kept") runs."
  echo -e "\nA capped run waited ${cap} s without the outcome (torchrun server_restart: time until its agents exited)."
} >"$res"
cat "$res"
