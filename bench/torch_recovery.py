#!/usr/bin/python3
"""A lost node, PyTorch side: how long until the survivors train again, with
muster.torch's in-place recovery and with the restart path, in the same run.

    /usr/bin/python3 bench/torch_recovery.py [RUNS]      # default 5 per mode

Each run: musterd and three nodes on loopback (an agent and its one worker
each, --nnodes=2:3, fast rdzv-conf), examples/ddp_inplace.py training
(--step-ms=20 --timing, --run-path). Once rank 0 reached step 50, the third
node's agent is killed with SIGKILL (its worker dies with it). Measured: from the kill to
the first step both survivors complete on the world of 2 (each prints its
wall clock; the later one counts). Runs alternate between
--recovery=in-place and --recovery=restart. For the restart path the new
workers' own report splits their start: from the process's start (exec) to
torch and muster.torch imported, forming the group, the state broadcast and
DDP (each part the larger of the two survivors': parts do not add up, since
the faster one waits in the group for the slower); the rest is the agent's (the lost node noticed, the old workers stopped,
the next round formed). Writes bench/results/torch-recovery.md.
"""

import os
import re
import signal
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import harness  # noqa: E402 (the tests' child-process helpers)

BIN = os.path.join(ROOT, "build", "bin")
FAST = "last_call_timeout=1,keep_alive_interval=0.25,keep_alive_max_attempt=12"
CAP_S = 120
# MODES=restart runs one path only (the table then has a row less).
MODES = os.environ.get("MODES", "in-place,restart").split(",")


def node(musterd, job, mode):
    env = dict(os.environ, PYTHON_EXEC="/usr/bin/python3", PYTHONPATH="",
               OMP_NUM_THREADS="1")
    return harness.Child(
        [os.path.join(BIN, "muster"), "--nnodes=2:3", "--nproc-per-node=1",
         *([f"--recovery={mode}"] if mode != "restart" else []),
         "--max-restarts=3", "--rdzv-backend=c10d",
         f"--rdzv-endpoint={musterd.endpoint}", f"--rdzv-id={job}",
         f"--rdzv-conf={FAST}", "--run-path",
         os.path.join(ROOT, "examples", "ddp_inplace.py"), "--steps=1000000",
         "--step-ms=20", "--timing"], env=env, tag=job)


def first_steps_after(out, t):
    """Wall-clock times of the 'first step' lines printed after t."""
    return [float(x) for x in re.findall(r"first step: rank \d+ step \d+ at "
                                         r"([\d.]+)", out) if float(x) > t]


def one_run(musterd, mode, i):
    job = f"bench-{mode}-{i}"
    nodes = [node(musterd, job, mode) for _ in range(3)]
    try:
        harness.wait_until(
            lambda: all(len(first_steps_after(n.output(), 0)) >= 1
                        for n in nodes) and
            any("step 50:" in n.output() for n in nodes), CAP_S,
            f"{job}: three nodes training (logs: "
            f"{', '.join(n.log.name for n in nodes)})")
        killed = time.time()
        os.kill(nodes[2].pid, signal.SIGKILL)
        survivors = nodes[:2]
        harness.wait_until(
            lambda: all(first_steps_after(n.output(), killed)
                        for n in survivors), CAP_S,
            f"{job}: both survivors training again")
        again = max(min(first_steps_after(n.output(), killed))
                    for n in survivors)
        result = {"training_again_s": again - killed}
        if mode == "restart":
            # The new workers' start: the last timing line of each survivor.
            parts = [re.findall(r"timing: start and import (\d+) ms, group (\d+) ms, "
                                r"state and DDP (\d+) ms", n.output())[-1]
                     for n in survivors]
            for k, name in enumerate(("import_s", "group_s", "ddp_s")):
                result[name] = max(int(p[k]) for p in parts) / 1000
        else:
            ms = [int(x) for n in survivors for x in re.findall(
                r"recovered: rank \d+ of 2 at step \d+ in (\d+) ms",
                n.output())]
            result["recover_call_s"] = max(ms) / 1000 if ms else float("nan")
            pids = [re.findall(r"start: rank \d+ of \d+ pid (\d+)",
                               n.output()) for n in survivors]
            result["same_processes"] = all(len(p) == 1 for p in pids)
        return result
    finally:
        for n in nodes:
            n.kill()


def summary(values):
    values = sorted(values)
    return (f"{statistics.median(values):.2f} s (min {values[0]:.2f}, "
            f"max {values[-1]:.2f})")


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    harness.BIN_DIR = BIN
    musterd = harness.Musterd()
    results = {"in-place": [], "restart": []}
    try:
        for i in range(runs):
            for mode in MODES:
                r = one_run(musterd, mode, i)
                results[mode].append(r)
                print(f"run {i} {mode}: " + ", ".join(
                    f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                    for k, v in r.items()), flush=True)
    finally:
        musterd.kill()
    ip, rs = results["in-place"], results["restart"]
    if not ip or not rs:
        return
    lines = [
        "# A lost node: PyTorch survivors training again (bench/torch_recovery.py)",
        "",
        f"`/usr/bin/python3 bench/torch_recovery.py {runs}`, {time.strftime('%Y-%m-%d')}, "
        f"{os.cpu_count()} cores (shared with other work), torch 1.13 (Debian), gloo, "
        "three one-worker nodes on loopback, kill -9 of one agent at step 50+.",
        "",
        "| path | kill -9 → both survivors' first step on the world of 2 | of which |",
        "|---|---|---|",
        f"| `--recovery=in-place` (muster.torch) | {summary([r['training_again_s'] for r in ip])} "
        f"| recover() and the state broadcast: {summary([r['recover_call_s'] for r in ip])}; "
        f"same processes in {sum(r['same_processes'] for r in ip)} of {len(ip)} runs |",
        f"| `--recovery=restart` (new processes) | {summary([r['training_again_s'] for r in rs])} "
        f"| the new process's start and importing torch: {summary([r['import_s'] for r in rs])}; forming the group: "
        f"{summary([r['group_s'] for r in rs])}; state and DDP: {summary([r['ddp_s'] for r in rs])} |",
        "",
    ]
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "torch-recovery.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
