"""muster.torch's in-place recovery with real torch processes, real gloo and
a real musterd, this test playing the agent: it writes each worker's
control-channel ``round`` file as the agent does (docs/architecture.md,
"Control channel"), kills a worker with SIGKILL, and starts a newcomer.

examples/ddp_inplace.py on three workers: one killed, the two survivors
recover to a world of 2 (the same processes), a newcomer grows it back to 3,
and every rank ends with the same parameters. Without the agent, no
namespace is dropped here (the real agent's tests are in
tests/e2e/torch_e2e_test.cc)."""

from __future__ import annotations

import json
import os
import re
import signal
import tempfile
import time
from typing import Dict, Iterator, List, Optional

import pytest

import harness

PYTHON = "/usr/bin/python3"
JOB = "simjob"


@harness.require("torch")
class InPlaceSimTest:
    @pytest.fixture(autouse=True)
    def processes(self) -> Iterator[None]:
        self.musterd = harness.Musterd()
        self.tmp = tempfile.mkdtemp(prefix="muster-inplace-sim-")
        self.seq: Dict[int, int] = {}
        self.children: List[harness.Child] = []
        yield
        for c in self.children:
            c.kill()
        self.musterd.kill()

    def write_round(self, worker: int, state: str, round_number: int,
                    rank: int, world_size: int, reason: str = "") -> str:
        d = os.path.join(self.tmp, f"w{worker}")
        os.makedirs(d, mode=0o700, exist_ok=True)
        self.seq[worker] = self.seq.get(worker, 0) + 1
        harness.write_round(
            d, seq=self.seq[worker], state=state, round=round_number,
            rank=rank, world_size=world_size, local_rank=0,
            local_world_size=1, group_rank=rank, group_world_size=world_size,
            role_rank=rank, role_world_size=world_size,
            master_addr="127.0.0.1", master_port=1,
            store_endpoint=self.musterd.endpoint,
            store_prefix=f"{JOB}/{round_number}", reason=reason)
        return d

    def start(self, worker: int, round_number: int, rank: int,
              world_size: int, steps: int) -> harness.Child:
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

    def hello_pid(self, worker: int) -> Optional[int]:
        try:
            with open(os.path.join(self.tmp, f"w{worker}", "hello")) as f:
                pid: int = json.load(f)["pid"]
                return pid
        except (OSError, ValueError):
            return None

    def test_shrink_then_grow(self) -> None:
        w = [self.start(i, 1, i, 3, steps=400) for i in range(3)]
        for i, c in enumerate(w):
            c.wait_for(rf"start: rank {i} of 3 pid {c.pid}", 120)
            assert harness.wait_until(
                lambda i=i: self.hello_pid(i), 10, "hello") == c.pid
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
            assert len(re.findall(r"^start:", w[i].output(),
                                  re.M)) == 1, w[i].output()
            assert w[i].proc.poll() is None

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
            assert c.wait(300) == 0, c.output()
        assert "all 3 ranks agree" in w[0].output()
        sums = {re.search(r"checksum (\w+)", c.output()).group(1)
                for c in (w[0], w[1], newcomer)}
        assert len(sums) == 1, sums
        print(f"survivors recovered {shrink_s:.2f} s after the loss")

