#!/usr/bin/env bash
# Collective bandwidth in one run: libmuster_comm (automatic choice, and its shared-memory transport
# forced: muster:shm) vs raw Gloo's allreduce algorithms (muster-bench)
# vs torch.distributed's gloo backend (torch_allreduce.py), all under muster on this machine.
# Prints markdown tables with a verdict per size, and draws the busbw curves to a PNG (gnuplot).
#
#   bash bench/collectives.sh [NPROC] [MAX_SIZE]       defaults: 2 ranks, 256M
#
# REPORT_ONLY=1 redraws the tables and the plot from an earlier run's CSV.
# Environment: BUILD_DIR (default build), OUT_DIR (default bench/results), SECONDS_PER_SIZE
# (default 0.5: time per size per implementation), BATCHES (default 10: the time reported is the
# best batch's; this machine is shared and noisy), MIN_SIZE (8).
# The default run takes about 5 minutes on 2 cores (docs/performance.md's table used
# SECONDS_PER_SIZE=1, about 11); `bash bench/collectives.sh 2 16M` about 2.
set -euo pipefail
cd "$(dirname "$0")/.."
nproc=${1:-2}
max=${2:-256M}
min=${MIN_SIZE:-8}
seconds=${SECONDS_PER_SIZE:-0.5}
batches=${BATCHES:-10}
bin=${BUILD_DIR:-build}/bin
out=${OUT_DIR:-bench/results}
python=/usr/bin/python3
[[ -x $bin/muster && -x $bin/muster-bench ]] || {
  echo "build first: cmake --build ${BUILD_DIR:-build} --target muster muster-bench" >&2; exit 1; }
mkdir -p "$out"
csv=$out/collectives-n$nproc.csv

if [[ ${REPORT_ONLY:-0} != 1 ]]; then
: > "$csv"
echo "== muster-bench: libmuster_comm and raw Gloo, $nproc ranks, $min..$max" >&2
"$bin/muster" --standalone --nproc-per-node="$nproc" --no-python "$bin/muster-bench" \
  --min="$min" --max="$max" --seconds="$seconds" --batches="$batches" --csv="$csv" \
  --impls=muster,muster:shm,gloo:ring,gloo:ring_chunked,gloo:halving_doubling,gloo:bcube \
  > "$out/muster-bench-n$nproc.txt"
grep -v '^\S* [IWD] \[muster\]' "$out/muster-bench-n$nproc.txt" >&2 || true

if $python -c 'import torch.distributed' 2>/dev/null; then
  echo "== torch.distributed (gloo), $nproc ranks" >&2
  PYTHON_EXEC=$python "$bin/muster" --standalone --nproc-per-node="$nproc" \
    bench/torch_allreduce.py --min="$min" --max="$max" --seconds="$seconds" --batches="$batches" \
    --csv="$csv" \
    > "$out/torch-n$nproc.txt"
  grep -v '^\S* [IWD] \[muster\]' "$out/torch-n$nproc.txt" >&2 || true
else
  echo "torch.distributed not importable by $python (apt-get install python3-torch): skipped" >&2
fi
fi  # REPORT_ONLY

echo "== report" >&2
$python bench/collectives_report.py "$csv" "$out/busbw-n$nproc.tsv" | tee "$out/report-n$nproc.md"

if command -v gnuplot >/dev/null; then
  png=$out/busbw-n$nproc.png
  cols=$(head -1 "$out/busbw-n$nproc.tsv" | cut -d' ' -f3-)
  plot=""
  i=2
  for name in $cols; do
    plot+="${plot:+, }'$out/busbw-n$nproc.tsv' using 1:$i with linespoints title '$name'"
    i=$((i + 1))
  done
  gnuplot <<EOF
set terminal png size 1100,650 noenhanced
set output '$png'
set title 'allreduce busbw, float32, $nproc ranks ($(hostname), $(nproc) cores, best of batches)'
set logscale x 2
set xtics ('8 B' 8, '64 B' 64, '512 B' 512, '4 KB' 4096, '32 KB' 32768, '256 KB' 262144, \
  '2 MB' 2097152, '16 MB' 16777216, '128 MB' 134217728)
set xlabel 'message size'
set ylabel 'busbw (GB/s)'
set key left top
set grid
plot $plot
EOF
  echo "plot: $png" >&2
else
  echo "gnuplot missing (bash scripts/install-deps.sh installs gnuplot-nox): no plot" >&2
fi
