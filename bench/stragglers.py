#!/usr/bin/env python3
"""Stragglers: how fast musterd names a slow rank and swaps its node for a spare.

Driven by bench/stragglers.sh (see there for the command and what it prints).

Scenario per speed S (0.5, 0.8): a musterd on loopback; 4 nodes of one `train`
worker each (--recovery=in-place --straggler-action=replace) and a 5th agent
waiting as a spare. After a baseline, rank 1's worker is slowed from outside to
about S of its speed: SIGSTOP for (1-S) of every 100 ms, SIGCONT for the rest.
Measured: time from the slowdown to the rank named in `muster status --json`,
time to its node's agent exiting 5 (replaced), and the job's step rate (rank
0's `step N at T` lines) before, during and after. Then the false alarms: an
unslowed job of the same shape beside a busy loop per core, for
--quiet-seconds (600 by default), counting musterd's "is a straggler" lines.
Then the measurement's cost: a 2-rank 8-byte AllReduce (muster-bench) with and
without the progress file, paired, against the train step it is part of.
"""

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "bin")
STEP_MS = 10
LOG_EVERY = 20


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Musterd:
    def __init__(self, log):
        self.port = free_port()
        self.log = open(log, "w")
        self.logname = log
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "musterd"), f"--listen=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise SystemExit("musterd did not start: see " + log)

    @property
    def endpoint(self):
        return f"127.0.0.1:{self.port}"

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class Node:
    """An agent; its output is read line by line, with arrival times."""

    def __init__(self, server, job, nodes, extra):
        argv = [os.path.join(BIN, "muster"), f"--nnodes={nodes}:{nodes}",
                "--nproc-per-node=1", "--max-restarts=0",
                "--rdzv-backend=c10d", f"--rdzv-endpoint={server.endpoint}",
                f"--rdzv-id={job}",
                "--rdzv-conf=last_call_timeout=0.5,keep_alive_interval=0.25,"
                "keep_alive_max_attempt=12",
                "--recovery=in-place", "--prefix-output"] + extra + [
                "--no-python", os.path.join(BIN, "train"), "--epochs=100000000",
                f"--step-ms={STEP_MS}", f"--log-every={LOG_EVERY}"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.lines = []  # (time, line)
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self.lock:
                self.lines.append((time.time(), line.rstrip("\n")))

    def text(self):
        with self.lock:
            return "\n".join(line for _, line in self.lines)

    def worker_pid(self):
        m = re.search(r"start: rank (\d+) of \d+ pid (\d+)", self.text())
        return (int(m.group(2)), int(m.group(1))) if m else (None, None)

    def steps(self):
        """(time the line came, step) for rank 0's `step N at T` lines."""
        with self.lock:
            out = []
            for _, line in self.lines:
                m = re.search(r"step (\d+) at ([0-9.]+)", line)
                if m:
                    out.append((float(m.group(2)), int(m.group(1))))
            return out

    def stop(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def wait_for(pred, timeout, every=0.1):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every)
    return None


def status_json(server, job):
    r = subprocess.run([os.path.join(BIN, "muster"), "status",
                        f"--rdzv-endpoint={server.endpoint}", "--json", job],
                       capture_output=True, text=True, timeout=20)
    if r.returncode != 0:
        return None
    try:
        j = json.loads(r.stdout)
    except json.JSONDecodeError:
        return None
    if isinstance(j, dict) and j.get("jobs"):
        return j["jobs"][0]
    return j if isinstance(j, dict) and "job_id" in j else None


def straggler_ranks(job):
    return [s.get("rank") for s in (job or {}).get("stragglers", [])]


def named(job, rank):
    """Among the stragglers, or already excluded with the rank in the reason."""
    if rank in straggler_ranks(job):
        return True
    return any(f"rank {rank} " in e.get("reason", "")
               for e in (job or {}).get("excluded", []))


class DutyCycle:
    """SIGSTOP for (1 - speed) of every `period`, SIGCONT for the rest."""

    def __init__(self, pid, speed, period=0.1):
        self.pid, self.stop_s, self.run_s = pid, (1 - speed) * period, speed * period
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.done.is_set():
            try:
                os.kill(self.pid, signal.SIGSTOP)
                time.sleep(self.stop_s)
                os.kill(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                return
            time.sleep(self.run_s)

    def end(self):
        self.done.set()
        self.thread.join()
        try:
            os.kill(self.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def rate(steps, t0, t1):
    """Steps per second of rank 0 between t0 and t1 (None: too few lines)."""
    inside = [(t, s) for t, s in steps if t0 <= t <= t1]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def scenario(speed, args, workdir):
    job = f"straggler-{int(speed * 100)}"
    server = Musterd(os.path.join(workdir, f"musterd-{job}.log"))
    extra = ["--straggler-action=replace"]
    if speed > 0.7:
        # 0.8 is above the default threshold (0.7): name it with a higher one.
        extra.append("--straggler-threshold=0.9")
    nodes = [Node(server, job, 4, extra) for _ in range(4)]
    result = {"speed": speed, "threshold": 0.9 if speed > 0.7 else 0.7}
    try:
        if not wait_for(lambda: all(n.worker_pid()[0] for n in nodes), 60):
            raise SystemExit("the job did not form:\n" +
                             "\n".join(n.text() for n in nodes))
        spare = Node(server, job, 4, extra)
        nodes.append(spare)
        if not wait_for(lambda: "spare" in spare.text(), 60):
            raise SystemExit("no spare:\n" + spare.text())
        time.sleep(args.baseline)
        slow_pid, slow_rank = nodes[1].worker_pid()
        rank0 = next(n for n in nodes if n.worker_pid()[1] == 0)
        t_slow = time.time()
        cycle = DutyCycle(slow_pid, speed)
        named_at = wait_for(
            lambda: named(status_json(server, job), slow_rank) and time.time(),
            120, every=0.25)
        replaced = wait_for(
            lambda: nodes[1].proc.poll() is not None and time.time(), 120,
            every=0.05)
        cycle.end()
        result["named_s"] = named_at - t_slow if named_at else None
        result["replaced_s"] = replaced - t_slow if replaced else None
        result["exit_code"] = nodes[1].proc.poll()
        # The survivors' recovery, then a settling second, then the after rate.
        recovered = wait_for(lambda: "recovered: " in rank0.text() and time.time(),
                             60)
        time.sleep(args.after + 1)
        steps = rank0.steps()
        result["rate_before"] = rate(steps, t_slow - args.baseline + 2, t_slow)
        result["rate_during"] = rate(steps, t_slow, replaced or time.time())
        if recovered:
            result["rate_after"] = rate(steps, recovered + 1,
                                        recovered + 1 + args.after)
    finally:
        for n in nodes:
            n.stop()
        server.stop()
    return result


def false_alarms(args, workdir):
    job = "straggler-quiet"
    server = Musterd(os.path.join(workdir, "musterd-quiet.log"))
    nodes = [Node(server, job, 4, []) for _ in range(4)]
    # A loaded machine: one busy loop per core beside the job.
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(os.cpu_count() or 1)]
    try:
        wait_for(lambda: all(n.worker_pid()[0] for n in nodes), 60)
        time.sleep(args.quiet_seconds)
        with open(server.logname) as f:
            alarms = sum(1 for line in f if "is a straggler" in line)
        return {"seconds": args.quiet_seconds, "alarms": alarms,
                "busy_loops": len(busy)}
    finally:
        for b in busy:
            b.kill()
            b.wait()
        for n in nodes:
            n.stop()
        server.stop()


def overhead(args):
    """Per 8-byte AllReduce: muster-bench with and without the progress file."""
    def one(with_file):
        # Without: the worker starts with the agent's variable unset.
        wrapper = [] if with_file else [
            "/bin/sh", "-c", 'unset MUSTER_PROGRESS_FILE; exec "$0" "$@"']
        r = subprocess.run(
            [os.path.join(BIN, "muster"), "--standalone", "--nproc-per-node=2",
             "--no-python"] + wrapper + [
                os.path.join(BIN, "muster-bench"), "--min=8", "--max=8",
                "--impls=muster", "--seconds=1", "--batches=5"],
            capture_output=True, text=True, timeout=120)
        for line in r.stdout.splitlines():
            f = line.split()
            if len(f) >= 5 and f[0] == "8":
                return float(f[4])
        raise SystemExit("muster-bench printed no 8-byte line:\n" + r.stdout +
                         r.stderr)

    on, off = [], []
    for _ in range(args.overhead_pairs):
        on.append(one(True))
        off.append(one(False))
    return {"with_us": statistics.median(on), "without_us": statistics.median(off),
            "with_all": on, "without_all": off}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--speeds", default="0.5,0.8")
    p.add_argument("--baseline", type=float, default=20)
    p.add_argument("--after", type=float, default=15)
    p.add_argument("--quiet-seconds", type=float, default=600)
    p.add_argument("--overhead-pairs", type=int, default=5)
    args = p.parse_args()
    out = {"cores": os.cpu_count(), "load": open("/proc/loadavg").read().split()[:3]}
    with tempfile.TemporaryDirectory() as workdir:
        # Each phase's figures go to stderr as soon as they exist.
        out["overhead"] = overhead(args)
        print(json.dumps(out["overhead"]), file=sys.stderr, flush=True)
        out["scenarios"] = []
        for speed in args.speeds.split(","):
            out["scenarios"].append(scenario(float(speed), args, workdir))
            print(json.dumps(out["scenarios"][-1]), file=sys.stderr, flush=True)
        if args.quiet_seconds > 0:
            out["false_alarms"] = false_alarms(args, workdir)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
