#!/usr/bin/env bash
# Launch overhead: the wall time of launching 4 no-op workers and seeing them all exit, for
# muster and for torchrun, measured in the same run with hyperfine.
#
#   bash bench/launch_overhead.sh [RUNS]     (default 10 runs each; needs build/bin/muster)
#
# torchrun is Debian's (python3-torch 1.13); its default redirects crash on Python 3.11, so it
# runs with -r 1 -t 1 (see MACHINE-NOTES). Prints a markdown table and the ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
muster=build/bin/muster
[[ -x $muster ]] || { echo "build first: bash scripts/build.sh" >&2; exit 1; }
command -v hyperfine >/dev/null || { echo "hyperfine missing: bash scripts/install-deps.sh" >&2; exit 1; }
out=$(mktemp -d)
cmds=("$muster --standalone --nproc-per-node=4 --no-python /bin/true"
      "env MUSTER_STANDALONE_SERVER=1 $muster --standalone --nproc-per-node=4 --no-python /bin/true")
# The second: the same launch with the embedded gRPC rendezvous server it used before issue 17.
names=("muster" "muster-grpc-server")
if command -v torchrun >/dev/null; then
  cmds+=("torchrun --standalone --nproc_per_node=4 --no_python -r 1 -t 1 /bin/true")
  names+=("torchrun")
else
  echo "torchrun not found (install python3-torch); measuring muster alone" >&2
fi
args=()
for i in "${!cmds[@]}"; do args+=(-n "${names[$i]}" "${cmds[$i]}"); done
hyperfine --style basic --warmup 1 --runs "$runs" --export-json "$out/launch.json" \
  --export-markdown "$out/launch.md" "${args[@]}" >&2
cat "$out/launch.md"
python3 - "$out/launch.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
m = r.get("muster")
g = r.get("muster-grpc-server")
t = r.get("torchrun")
print(f"\nmuster: mean {m['mean']*1e3:.1f} ms (min {m['min']*1e3:.1f}, max {m['max']*1e3:.1f})")
if g:
    print(f"muster with the gRPC server: mean {g['mean']*1e3:.1f} ms (min {g['min']*1e3:.1f}, max {g['max']*1e3:.1f})")
if t:
    print(f"torchrun: mean {t['mean']*1e3:.1f} ms (min {t['min']*1e3:.1f}, max {t['max']*1e3:.1f})")
    print(f"torchrun / muster = {t['mean']/m['mean']:.1f}x")
PY
