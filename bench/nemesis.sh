#!/usr/bin/env bash
# The nemesis soak (issue 35): N one-minute schedules of tests/e2e/nemesis_e2e_test.cc, each with
# its own seed: 3 musterd replicas over 3 etcd members, a 3-node job under --recovery=restart and
# one under --recovery=in-place, 8 Store clients, while leader kill -9, leader SIGSTOP/SIGCONT,
# etcd member SIGSTOP, the leader cut from etcd in a network namespace (as root; else skipped)
# and replica restarts are applied one at a time. Prints a table per run and updates the
# "Nemesis" section of docs/performance.md (and bench/results/nemesis.md).
#
#   bash bench/nemesis.sh [N]              (default 10)
#   NEMESIS_SEED=S bash bench/nemesis.sh   (seeds S, S+1, ...; default: random)
#   NEMESIS_SECONDS=60                     (the length of each schedule)
#
# Needs build/bin/nemesis_e2e_test (cmake --build build --target nemesis_e2e_test). A failed run
# leaves its files (history, etcd's record, every process's output) in the folder its output
# names; the output of every run is kept in $NEMESIS_LOGS/SEED.log (default
# /tmp/muster-nemesis-runs).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
seconds=${NEMESIS_SECONDS:-60}
base=${NEMESIS_SEED:-$((RANDOM * 32768 + RANDOM))}
bin=build/bin/nemesis_e2e_test
[[ -x $bin ]] || { echo "missing $bin (cmake --build build --target nemesis_e2e_test)" >&2; exit 1; }
logs=${NEMESIS_LOGS:-/tmp/muster-nemesis-runs}
mkdir -p "$logs"
rows=()
failed=0
header="| run | seed | faults applied | worker restarts | acknowledged writes lost | ops recorded (unknown) | linearizable as answered / as sent | checker s | result | seconds |"
rule="|---|---|---|---|---|---|---|---|---|---|"
echo "$header"
echo "$rule"
for ((i = 0; i < runs; i++)); do
  seed=$((base + i))
  log=$logs/$seed.log
  start=$(date +%s.%N)
  rc=0
  MUSTER_BIN_DIR=$PWD/build/bin MUSTER_SOURCE_DIR=$PWD MUSTER_NEMESIS_SEED=$seed \
    MUSTER_NEMESIS_SECONDS=$seconds timeout 600 "$bin" >"$log" 2>&1 || rc=$?
  secs=$(awk -v a="$(date +%s.%N)" -v t="$start" 'BEGIN { printf "%.0f", a - t }')
  line=$(grep '^nemesis-summary ' "$log" | tail -1 || true)
  field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line"; }
  faults=$(field faults); cut=$(field cut)
  [[ $cut == skipped ]] && faults="${faults:-?} (no leader-cut)"
  # What failed, from the summary line (the test's own checks, in its order).
  why=()
  [[ $(field worker_restarts) =~ ^[1-9] || $(field inplace_recoveries) =~ ^[1-9] ]] && why+=("workers restarted")
  [[ $(field agents_failed) =~ ^[1-9] ]] && why+=("an agent exited non-zero")
  [[ $(field lost_writes) =~ ^[1-9] ]] && why+=("writes lost")
  [[ -n $line && $(field linearizable_as_sent) != yes ]] && why+=("replicas' history not linearizable")
  [[ -n $line && $(field linearizable_as_sent) == yes && $(field linearizable) != yes ]] && why+=("answers not linearizable: GrpcStore's repeat")
  [[ -z $line ]] && why+=("no summary: see $log")
  ((${#why[@]})) || why=("see $log")
  verdict=$([[ $rc == 0 ]] && echo pass || (IFS=';'; echo "FAIL: ${why[*]}" | sed 's/;/; /g'))
  [[ $rc == 0 ]] || failed=$((failed + 1))
  row="| $((i + 1)) | $seed | ${faults:-?} | $(field worker_restarts) | $(field lost_writes) | $(field ops) ($(field unknown)) | $(field linearizable) / $(field linearizable_as_sent) | $(field checker_s) | $verdict | $secs |"
  rows+=("$row")
  echo "$row"
  if [[ $rc != 0 ]]; then
    grep -E '^\[nemesis seed|acknowledged write lost|not linearizable|started again|recovered' "$log" \
      | cut -c1-300 | head -8 >&2 || true
  fi
done

host="$(date -u +%F) on $(nproc) cores, $(uname -r), $(id -u | sed 's/^0$/root/;s/^[0-9]*$/not root/'); main $(git rev-parse --short HEAD 2>/dev/null || echo '?') (with the working tree's changes, if any)"
section=$(mktemp)
trap 'rm -f "$section"' EXIT
{
  echo "## Nemesis (issue 35)"
  echo
  echo "\`bash bench/nemesis.sh $runs\` (NEMESIS_SEED=$base, NEMESIS_SECONDS=$seconds): $runs schedules of"
  echo "tests/e2e/nemesis_e2e_test.cc, each a minute of faults applied one at a time with 1-3 s"
  echo "between them (leader kill -9, leader SIGSTOP for 1-5 s until another leads, etcd member"
  echo "SIGSTOP for 1-5 s, the leader cut from etcd by iptables in its network namespace, a replica"
  echo "restarted) to 3 musterd replicas over 3 etcd members on one machine, while a 3-node job under"
  echo "each recovery mode runs and 8 GrpcStore clients record a history on 5 shared keys and keys"
  echo "of their own. Worker restarts count every worker start beyond one per rank (and in-place"
  echo "recoveries); a lost write is an acknowledged Set of a client's own key not read back at the"
  echo "end; linearizable \"as sent\" adds, for each Set, CompareSet or Delete in flight across a"
  echo "fault, a first attempt of unknown outcome (a write GrpcStore might have repeated on the next"
  echo "leader, as it did before fa8bdfc), \"as answered\" takes the answers as the clients saw"
  echo "them."
  echo "$host; $failed of $runs runs failed."
  echo
  echo "$header"
  echo "$rule"
  printf '%s\n' "${rows[@]}"
  echo
  echo "<!-- end of bench/nemesis.sh output; notes below it are kept by the next run -->"
} >"$section"
cp "$section" bench/results/nemesis.md
# Replace this script's output in docs/performance.md's section (from its heading to the end
# marker, or to the next "## " when there is none; notes after the marker stay), or append it.
python3 - "$section" docs/performance.md <<'PY'
import re, sys
section = open(sys.argv[1]).read()
path = sys.argv[2]
doc = open(path).read()
m = re.search(r'^## Nemesis \(issue 35\)\n.*?(?:^<!-- end of bench/nemesis.sh output[^\n]*\n|(?=^## |\Z))',
              doc, re.S | re.M)
doc = doc[:m.start()] + section + doc[m.end():] if m else doc.rstrip('\n') + '\n\n' + section
open(path, 'w').write(doc)
PY
echo "docs/performance.md: section \"Nemesis (issue 35)\" updated ($failed of $runs failed)"
[[ $failed == 0 ]]
