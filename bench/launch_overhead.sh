#!/usr/bin/env bash
# Launch overhead: the wall time of launching 4 no-op workers and seeing them all exit, for
# muster, for a shell starting the same 4 processes (the floor: fork/exec and wait, nothing else)
# and for torchrun, paired: one hyperfine invocation measures them one after another, so the
# shell's figure says what the machine allowed at that moment.
#
#   bash bench/launch_overhead.sh [RUNS]     (default 20 runs each; needs build/bin/muster)
#
# hyperfine -N: no intermediate shell, so the shell's figure is the shell's own. torchrun is
# Debian's (python3-torch 1.13); its default redirects crash on Python 3.11, so it runs with
# -r 1 -t 1 (see MACHINE-NOTES). Prints a markdown table, then median, mean ± σ and min-max of each
# and muster's time above the shell's. MUSTER_BENCH_NO_TORCHRUN=1 leaves torchrun out.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
muster=build/bin/muster
[[ -x $muster ]] || { echo "build first: bash scripts/build.sh" >&2; exit 1; }
command -v hyperfine >/dev/null || { echo "hyperfine missing: bash scripts/install-deps.sh" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cmds=("$muster --standalone --nproc-per-node=4 --no-python /bin/true"
      "sh -c '/bin/true & /bin/true & /bin/true & /bin/true & wait'"
      "env MUSTER_STANDALONE_SERVER=1 $muster --standalone --nproc-per-node=4 --no-python /bin/true")
# The third: the same launch with the embedded gRPC rendezvous server it used before issue 17.
names=("muster" "shell" "muster-grpc-server")
if [[ ${MUSTER_BENCH_NO_TORCHRUN:-0} != 1 ]] && command -v torchrun >/dev/null; then
  cmds+=("torchrun --standalone --nproc_per_node=4 --no_python -r 1 -t 1 /bin/true")
  names+=("torchrun")
elif [[ ${MUSTER_BENCH_NO_TORCHRUN:-0} != 1 ]]; then
  echo "torchrun not found (install python3-torch); measuring muster and the shell" >&2
fi
args=()
for i in "${!cmds[@]}"; do args+=(-n "${names[$i]}" "${cmds[$i]}"); done
echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(git rev-parse --short HEAD 2>/dev/null || echo '?')" >&2
hyperfine -N --style basic --warmup 3 --runs "$runs" --export-json "$out/launch.json" \
  --export-markdown "$out/launch.md" "${args[@]}" >&2
cat "$out/launch.md"
python3 - "$out/launch.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
print()
for name in ("muster", "shell", "muster-grpc-server", "torchrun"):
    x = r.get(name)
    if x:
        print(f"{name}: median {x['median']*1e3:.1f} ms, mean {x['mean']*1e3:.1f} ± "
              f"{x['stddev']*1e3:.1f} ms, min {x['min']*1e3:.1f}, max {x['max']*1e3:.1f} "
              f"({len(x['times'])} runs)")
m, s, t = r["muster"], r["shell"], r.get("torchrun")
print(f"muster - shell (medians) = {(m['median']-s['median'])*1e3:.1f} ms; "
      f"muster / shell = {m['median']/s['median']:.1f}x")
if t:
    print(f"torchrun / muster (medians) = {t['median']/m['median']:.0f}x")
PY
