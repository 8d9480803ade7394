"""muster.torch's in-place recovery with real torch processes, real gloo and
a real musterd, this test playing the agent: it writes each worker's
control-channel ``round`` file as the agent does (docs/architecture.md,
"Control channel"), kills a worker with SIGKILL, and starts a newcomer.

examples/ddp_inplace.py on three workers: one killed, the two survivors
recover to a world of 2 (the same processes), a newcomer grows it back to 3,
and every rank ends with the same parameters. Without the agent, no
namespace is dropped here (the real agent's tests are in
tests/e2e/torch_e2e_test.cc)."""

import json
import os
import re
import signal
import tempfile
import time
import unittest

import harness

PYTHON = "/usr/bin/python3"
JOB = "simjob"


@harness.require("torch", "grpc")
class InPlaceSimTest(unittest.TestCase):
    def setUp(self):
        self.musterd = harness.Musterd()
        self.addCleanup(self.musterd.kill)
        self.tmp = tempfile.mkdtemp(prefix="muster-inplace-sim-")
        self.seq = {}
        self.children = []

    def tearDown(self):
        for c in self.children:
            c.kill()

    def write_round(self, worker, state, round_number, rank, world_size,
                    reason=""):
        d = os.path.join(self.tmp, f"w{worker}")
        os.makedirs(d, mode=0o700, exist_ok=True)
        self.seq[worker] = self.seq.get(worker, 0) + 1
        body = {"version": 1, "seq": self.seq[worker], "state": state,
                "round": round_number, "rank": rank,
                "world_size": world_size, "local_rank": 0,
                "local_world_size": 1, "group_rank": rank,
                "group_world_size": world_size, "role_rank": rank,
                "role_world_size": world_size, "master_addr": "127.0.0.1",
                "master_port": 1, "store_endpoint": self.musterd.endpoint,
                "store_prefix": f"{JOB}/{round_number}", "restart_count": 0,
                "reason": reason}
        with open(os.path.join(d, "round.tmp"), "w") as f:
            json.dump(body, f)
        os.replace(os.path.join(d, "round.tmp"), os.path.join(d, "round"))
        return d

    def start(self, worker, round_number, rank, world_size, steps):
        d = self.write_round(worker, "running", round_number, rank,
                             world_size)
        env = dict(os.environ)
        env.update({
            "RANK": str(rank), "WORLD_SIZE": str(world_size),
            "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
            "GROUP_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "1", "MUSTER_ROUND": str(round_number),
            "MUSTER_STORE_ENDPOINT": self.musterd.endpoint,
            "MUSTER_STORE_PREFIX": f"{JOB}/{round_number}",
            "MUSTER_RECOVERY": "in-place", "MUSTER_CONTROL_DIR": d,
            "OMP_NUM_THREADS": "1"})
        c = harness.Child([PYTHON, "-u", os.path.join(
            harness.SOURCE_DIR, "examples", "ddp_inplace.py"),
            f"--steps={steps}", "--step-ms=20"], env=env, tag=f"w{worker}")
        self.children.append(c)
        return c

    def hello_pid(self, worker):
        try:
            with open(os.path.join(self.tmp, f"w{worker}", "hello")) as f:
                return json.load(f)["pid"]
        except (OSError, ValueError):
            return None

    def test_shrink_then_grow(self):
        w = [self.start(i, 1, i, 3, steps=400) for i in range(3)]
        for i, c in enumerate(w):
            c.wait_for(rf"start: rank {i} of 3 pid {c.pid}", 120)
            self.assertEqual(harness.wait_until(
                lambda i=i: self.hello_pid(i), 10, "hello"), c.pid)
        w[0].wait_for(r"step 50:", 120)

        # Worker 2 is lost; the agent tells the others, then the next round.
        os.kill(w[2].pid, signal.SIGKILL)
        w[2].wait(10)
        lost = time.monotonic()
        for i in (0, 1):
            self.write_round(i, "changing", 1, i, 3, reason="node 2 lost")
        for i in (0, 1):
            self.write_round(i, "running", 2, i, 2)
        for i in (0, 1):
            w[i].wait_for(rf"recovered: rank {i} of 2 at step \d+", 60)
        shrink_s = time.monotonic() - lost
        for i in (0, 1):
            self.assertEqual(len(re.findall(r"^start:", w[i].output(), re.M)),
                             1, w[i].output())
            self.assertIsNone(w[i].proc.poll())

        # A newcomer waits: round 2 ends, round 3 has three ranks.
        for i in (0, 1):
            self.write_round(i, "changing", 2, i, 2, reason="a newcomer")
        for i in (0, 1):
            self.write_round(i, "running", 3, i, 3)
        newcomer = self.start(3, 3, 2, 3, steps=400)
        for i in (0, 1):
            w[i].wait_for(rf"recovered: rank {i} of 3 at step \d+", 120)
        newcomer.wait_for(r"start: rank 2 of 3", 120)

        for c in (w[0], w[1], newcomer):
            self.assertEqual(c.wait(300), 0, c.output())
        self.assertIn("all 3 ranks agree", w[0].output())
        sums = {re.search(r"checksum (\w+)", c.output()).group(1)
                for c in (w[0], w[1], newcomer)}
        self.assertEqual(len(sums), 1, sums)
        print(f"survivors recovered {shrink_s:.2f} s after the loss")


if __name__ == "__main__":
    unittest.main()
