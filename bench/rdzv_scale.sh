#!/usr/bin/env bash
# Rendezvous at scale: one musterd, one job of N simulated agents (muster-loadgen), for N in a
# sweep. Per size: time to form the round, p50/p99 RoundReady latency, musterd's CPU seconds per
# second while N agents heartbeat (at the interval musterd suggests, its heartbeat budget, as the
# agent follows it; LOADGEN_ARGS=--fixed-heartbeat for the agent's default 250 ms throughout), its
# memory, and a node loss (Restart to every survivor, then the next RoundReady).
#
#   bash bench/rdzv_scale.sh [N ...]          (default: 1000 3000 10000 30000 100000)
#   MUSTERD=path/to/musterd bash bench/rdzv_scale.sh 1000   (another musterd, e.g. main's)
#   MUSTERD_ARGS="--session-queues=8" (more musterd flags)
#   LOADGEN_ARGS="--fixed-heartbeat" (more load generator flags)
#   HB_SECONDS=10 (heartbeat phase)  LABEL=name (file names)  MAX_FORM_S=60 (stop rule)
#   HB_TIMEOUT_MS=10000 (the heartbeat timeout the simulated agents ask for; more where the load
#   generator cannot keep its schedule, e.g. on a shared machine)
#   LOADGEN_PROCESSES=N (muster-loadgen --processes: the agents spread over N processes, each with
#   its own connections, completion queues and heartbeat thread, all in the same job). Default: 1
#   below 20,000 agents, 4 from 20,000 up. Below 20,000 one process keeps its schedule (heartbeat
#   lag 0.1-0.15 s at 10,000 agents on a quiet 2-core machine), and the small sizes stay as they
#   were measured before. From 20,000 up one process is what limits the run: at 20,000 (2 cores,
#   shared) its heartbeat thread fell 0.7-2.3 s behind and the round took 2.8-3.0 s to form
#   (musterd 2.2-3.1 CPU-s); with 4 processes the lag was 0.05-0.3 s and the round took mostly
#   1.4-1.8 s (1.4-1.9 CPU-s), with 2 about 2 s, with 8 no less than with 4. The table says how
#   many ran, and the worst heartbeat lag (over 1 s, and the load generator again limits the run).
#   LEASE_MS=N (muster-loadgen --lease-ms: the lease the simulated agents ask for, their job's
#   rdzv-conf lease_timeout). Default: musterd's (5 s) below 50,000 agents, 60000 from 50,000 up.
#   The lease caps the heartbeat interval at lease/4 whatever musterd's heartbeat budget suggests:
#   with a 5 s lease 100,000 agents send 80,000 heartbeats a second (10x the budget), more than
#   2 cores can take on both sides, and the agents were lost for silence before the round formed.
#   A job of that size asks for a longer lease; 60 s lets the budget's 12.5 s interval through.
#
# Writes bench/results/rdzv-scale-$LABEL.{tsv,md,png}: a markdown table and an ASCII plot (gnuplot
# dumb terminal) for docs/performance.md, and a PNG. The sweep stops early when a size did not
# form, took longer than MAX_FORM_S, or when less memory is free than the next size would need
# (about 40 KiB per agent in musterd plus as much in the load generator, measured); the table says
# why it stopped. musterd runs at its default log level (info) with its log in the results dir.
set -euo pipefail
cd "$(dirname "$0")/.."
musterd=${MUSTERD:-build/bin/musterd}
read -r -a musterd_args <<<"${MUSTERD_ARGS:-}"
read -r -a loadgen_args <<<"${LOADGEN_ARGS:-}"
loadgen=${LOADGEN:-build/bin/muster-loadgen}
label=${LABEL:-$(git rev-parse --abbrev-ref HEAD 2>/dev/null || echo run)}
hb=${HB_SECONDS:-10}
max_form=${MAX_FORM_S:-60}
hb_timeout_ms=${HB_TIMEOUT_MS:-10000}
processes=${LOADGEN_PROCESSES:-}
lease_ms=${LEASE_MS:-}
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(1000 3000 10000 30000 100000)
for b in "$musterd" "$loadgen"; do
  [[ -x $b ]] || { echo "missing $b: cmake --build build --target musterd muster-loadgen" >&2; exit 1; }
done
res=bench/results
mkdir -p "$res"
tsv=$res/rdzv-scale-$label.tsv
md=$res/rdzv-scale-$label.md
log=$(mktemp -d)
echo -e "agents\tformed_s\tp50_ms\tp99_ms\tcpu_per_s\trss_mib\tloss_restart_s\tloss_ready_s\tform_cpu_s\thb_per_s\thb_sched\tus_per_hb\tcpu_full\thb_ms\tprocs\tlag_ms" >"$tsv"
stop_reason=""

# A key=value of the load generator's output, or "-" (empty fields would collapse in `read`).
value() {
  local v
  v=$(sed -n "s/^$1=\([^ ]*\).*/\1/p" "$2" | head -1)
  echo "${v:--}"
}

for n in "${sizes[@]}"; do
  # Memory: ~40 KiB per agent on each side (measured at 10k), with 2 GiB to spare.
  need_kib=$((n * 80 + 2 * 1024 * 1024))
  avail_kib=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
  if ((avail_kib < need_kib)); then
    stop_reason="stopped before $n agents: $((avail_kib / 1024)) MiB free, about $((need_kib / 1024)) MiB needed"
    break
  fi
  rm -f "$log/port"
  "$musterd" --listen=127.0.0.1:0 --port-file="$log/port" "${musterd_args[@]}" 2>"$log/musterd-$n.log" &
  pid=$!
  for _ in $(seq 100); do [[ -s $log/port ]] && break; sleep 0.1; done
  [[ -s $log/port ]] || { echo "musterd did not start: $(tail -3 "$log/musterd-$n.log")" >&2; kill $pid; exit 1; }
  port=$(cat "$log/port")
  procs=${processes:-$((n < 20000 ? 1 : 4))}
  lease=${lease_ms:-$((n < 50000 ? 0 : 60000))}
  echo "== $n agents in $procs load generator process(es) (musterd pid $pid, port $port)" >&2
  rc=0
  timeout $((180 + n / 200)) "$loadgen" --endpoint="127.0.0.1:$port" --agents="$n" --seconds="$hb" \
    --processes="$procs" --lease-ms="$lease" --musterd-pid="$pid" --heartbeat-timeout-ms="$hb_timeout_ms" \
    "${loadgen_args[@]}" \
    >"$log/loadgen-$n.txt" 2>"$log/loadgen-$n.err" || rc=$?
  mrc=0
  kill -0 "$pid" 2>/dev/null || mrc="gone before the end"
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || mrc="${mrc/0/$?}"
  cat "$log/loadgen-$n.txt" >&2
  cp "$log/loadgen-$n.txt" "$res/rdzv-scale-$label-$n.txt"
  # musterd's last words and how it ended (a crash would show here), and the load generator's
  # (a shard that died says so there too).
  { echo "--- musterd (exit status after SIGTERM: $mrc), last log lines:"; tail -5 "$log/musterd-$n.log"; } \
    >>"$res/rdzv-scale-$label-$n.txt"
  if [[ -s $log/loadgen-$n.err ]]; then
    { echo "--- muster-loadgen (exit status $rc), last stderr lines:"; tail -5 "$log/loadgen-$n.err"; } \
      >>"$res/rdzv-scale-$label-$n.txt"
  fi
  f=$log/loadgen-$n.txt
  formed=$(value round_formed_s "$f")
  grep -q "round_formed_s=.*not formed" "$f" && formed=-
  # The heartbeat intervals the agents used (one figure when all used the same).
  hb_ms=$(value heartbeat_interval_ms_min "$f")
  hb_max=$(value heartbeat_interval_ms_max "$f")
  [[ $hb_ms == "$hb_max" ]] || hb_ms="$hb_ms-$hb_max"
  echo -e "$n\t$formed\t$(value ready_p50_ms "$f")\t$(value ready_p99_ms "$f")\t$(value server_cpu_per_s "$f")\t$(value musterd_rss_mib "$f")\t$(value node_loss_restart_s "$f")\t$(value node_loss_ready_s "$f")\t$(value form_cpu_s "$f")\t$(value heartbeats_per_s "$f")\t$(value heartbeats_per_s_scheduled "$f")\t$(value server_cpu_us_per_heartbeat "$f")\t$(value server_cpu_per_s_full_rate "$f")\t$hb_ms\t$procs\t$(value loadgen_heartbeat_lag_max_ms "$f")" >>"$tsv"
  if ((rc != 0)) || grep -q "not formed\|not re-formed" "$f"; then
    stop_reason="stopped after $n agents: the load generator failed (exit $rc; see $res/rdzv-scale-$label-$n.txt)"
    break
  fi
  if [[ $formed != - ]] && awk -v f="$formed" -v m="$max_form" 'BEGIN {exit !(f > m)}'; then
    stop_reason="stopped after $n agents: the round took ${formed} s (over ${max_form} s)"
    break
  fi
done

{
  echo "| agents | round formed | RoundReady p50 | p99 | heartbeat interval | musterd CPU while heartbeating | heartbeats/s sent (scheduled) | musterd CPU per heartbeat | at the full schedule | musterd RSS | node loss: all Restart | node loss: re-formed | musterd CPU to form | load generator: processes, heartbeat lag max |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  tail -n +2 "$tsv" | while IFS=$'\t' read -r n f p50 p99 cpu rss lr lf fc hb hs us full hbms procs lag; do
    echo "| $n | $f s | $p50 ms | $p99 ms | $hbms ms | $cpu CPU-s/s | $hb ($hs) | $us µs | $full CPU-s/s | $rss MiB | $lr s | $lf s | $fc s | $procs, $lag ms |" | sed 's/| - [a-zA-Zµ/-]*/| -/g'
  done
  [[ -z $stop_reason ]] || echo -e "\n$stop_reason"
} >"$md"

if command -v gnuplot >/dev/null && (($(wc -l <"$tsv") > 1)); then
  plot='set datafile missing "-"; set logscale xy; set xlabel "agents"; set ylabel "seconds"; set key left top;
plot "'$tsv'" using 1:2 skip 1 with linespoints title "round formed (s)", "" using 1:8 skip 1 with linespoints title "node loss: re-formed (s)", "" using 1:5 skip 1 with linespoints title "musterd CPU-s/s heartbeating"'
  { echo; echo '```'; gnuplot -e "set terminal dumb 90 28; $plot" 2>/dev/null; echo '```'; } >>"$md"
  gnuplot -e "set terminal png size 900,560 noenhanced; set output '$res/rdzv-scale-$label.png'; $plot"
fi
cat "$md"
rm -rf "$log"
