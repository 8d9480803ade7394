#!/usr/bin/env bash
# Stragglers: time to name a rank slowed from outside, time to swap its node for a spare in
# place, the job's step rate before, during and after; false alarms of an unslowed job on a
# loaded machine; the cost of measuring, per step.
#
#   bash bench/stragglers.sh [--speeds=0.5,0.8] [--quiet-seconds=600] [--baseline=20]
#                            [--after=15] [--overhead-pairs=5]
#
# Needs build/bin/{muster,musterd,train,muster-bench}. 4 nodes of one `train` worker each
# (--step-ms=10) and a spare, on loopback, --recovery=in-place --straggler-action=replace;
# rank 1 slowed by SIGSTOP/SIGCONT on a 100 ms duty cycle (bench/stragglers.py says how each
# figure is taken). Prints the JSON of every figure, then a summary; docs/performance.md
# ("Stragglers") has the figures and this command.
set -euo pipefail
cd "$(dirname "$0")/.."
for b in muster musterd train muster-bench; do
  [[ -x build/bin/$b ]] || { echo "missing build/bin/$b: cmake --build build --target $b" >&2; exit 1; }
done
echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(git rev-parse --short HEAD 2>/dev/null || echo '?')" >&2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
python3 bench/stragglers.py "$@" | tee "$out"
python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
fmt = lambda v, f="{:.1f}": "-" if v is None else f.format(v)
print("\n| speed | threshold | named (s) | replaced (s) | exit | steps/s before | during | after | after/before |")
print("|---|---|---|---|---|---|---|---|---|")
for s in r["scenarios"]:
    ratio = s["rate_after"] / s["rate_before"] if s.get("rate_after") and s.get("rate_before") else None
    print(f"| {s['speed']} | {s['threshold']} | {fmt(s['named_s'])} | {fmt(s['replaced_s'])} | "
          f"{s['exit_code']} | {fmt(s['rate_before'])} | {fmt(s['rate_during'])} | "
          f"{fmt(s.get('rate_after'))} | {fmt(ratio, '{:.2f}')} |")
o = r["overhead"]
step_us = 1e6 / r["scenarios"][0]["rate_before"] if r["scenarios"][0].get("rate_before") else None
extra = o["with_us"] - o["without_us"]
print(f"\nmeasuring: 8-byte AllReduce {o['with_us']:.1f} us with the progress file, "
      f"{o['without_us']:.1f} us without (medians of {len(o['with_all'])} pairs; "
      f"spread {min(o['with_all']):.1f}-{max(o['with_all']):.1f} / "
      f"{min(o['without_all']):.1f}-{max(o['without_all']):.1f})")
if step_us:
    print(f"  difference {extra:+.1f} us per collective = {100 * extra / step_us:+.3f} % of a "
          f"{step_us / 1000:.1f} ms train step")
if "false_alarms" in r:
    f = r["false_alarms"]
    print(f"false alarms: {f['alarms']} in {f['seconds']:.0f} s of an unslowed job beside "
          f"{f['busy_loops']} busy loops")
PY
