#!/usr/bin/env bash
# A paused leader never acts (issue 35): the scenario that restarted a running job's workers on
# main 1484feb, repeated N times on one job. Two musterd replicas over a 3-member etcd cluster on
# loopback, one job of 2 agents x 2 workers; each cycle kills the leader (kill -9; the other
# leads and re-adopts the round; the killed one is restarted), then SIGSTOPs the new leader until
# the standby took over, then SIGCONTs it: it must act on nothing and exit 75. Counts worker
# starts (4 means none restarted) and times the whole run.
#
#   bash bench/paused_leader.sh [CYCLES]     (default 10)
#
# Runs tests/e2e/paused_leader_e2e_test.cc (build/bin/paused_leader_e2e_test) with
# MUSTER_PAUSED_LEADER_CYCLES=CYCLES; defaults: musterd's replica defaults, etcd 3.4's.
# Writes bench/results/paused_leader.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cycles=${1:-10}
bin=build/bin/paused_leader_e2e_test
[[ -x $bin ]] || { echo "missing $bin (cmake --build build --target paused_leader_e2e_test)" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s.%N)
rc=0
MUSTER_PAUSED_LEADER_CYCLES=$cycles "$bin" >"$out" 2>&1 || rc=$?
secs=$(awk -v a="$(date +%s.%N)" -v t="$start" 'BEGIN { printf "%.1f", a - t }')
starts=$(sed -n 's/^paused-leader cycles: [0-9]*, worker starts: \([0-9]*\).*/\1/p' "$out")
deposed=$(sed -n 's/.*paused leaders deposed: \([0-9]*\).*/\1/p' "$out")
held=$(sed -n 's/.*ended while unconfirmed: \([0-9]*\).*/\1/p' "$out")
verdict=$([[ $rc == 0 ]] && echo pass || echo FAIL)
mkdir -p bench/results
{
  echo "# Paused leader (bench/paused_leader.sh $cycles)"
  echo
  echo "$(date -u +%F) on $(nproc) cores, $(uname -r); musterd $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo
  echo "| cycles | worker starts (4 = none restarted) | paused leaders that exited 75 | streams that ended while unconfirmed (left to rejoin) | result | seconds |"
  echo "|---|---|---|---|---|---|"
  echo "| $cycles | ${starts:-?} | ${deposed:-?} | ${held:-?} | $verdict | $secs |"
} | tee bench/results/paused_leader.md
if [[ $rc != 0 ]]; then
  tail -60 "$out" >&2
  exit "$rc"
fi
