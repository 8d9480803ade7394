"""The worker side of the control channel (muster._control) against files
written as the agent writes them (the golden files of the one codec,
tests/testdata/control/, and harness.write_round): round_changed's rule, the 2 ms wait for a
running round, hello, and a partial file read as "no change"."""

from __future__ import annotations

import json
import os
import stat
import tempfile
import time

import pytest

import harness
from harness import write_round
from muster import _control


class ControlTest:
    @pytest.fixture(autouse=True)
    def channel_dir(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="muster-control-")
        self.channel = _control.ControlChannel(self.dir)

    def test_round_changed_follows_the_contract(self) -> None:
        write_round(self.dir, seq=1, round=3)
        formed = self.channel.current_running()
        assert (formed.round, formed.seq) == (3, 1)
        assert not self.channel.changed_since(formed)
        # The same seq never counts, whatever it says.
        write_round(self.dir, seq=1, round=3, state="changing")
        assert not self.channel.changed_since(formed)
        write_round(self.dir, seq=2, round=3, state="changing",
                    reason="node b lost")
        assert self.channel.changed_since(formed)
        assert "node b lost" in self.channel.describe()
        # A later running round counts; a rewrite of the same round does not.
        write_round(self.dir, seq=3, round=4)
        assert self.channel.changed_since(formed)
        write_round(self.dir, seq=4, round=3)
        assert not self.channel.changed_since(formed)

    def test_the_agents_golden_round_files(self) -> None:
        # What the agent writes (tests/testdata/control/round.golden, checked
        # against the C++ codec by control_round_test and agent_state_test).
        running = harness.control_golden("round.golden")
        with open(os.path.join(self.dir, "round"), "w") as f:
            f.write(running)
        formed = self.channel.current_running()
        assert formed is not None
        assert (formed.seq, formed.round, formed.rank, formed.world_size) == (
            1, 7, 4, 5)
        assert formed.store_endpoint == "10.0.0.1:29400"
        assert formed.store_prefix == "job-42/2/"
        assert formed.store_token == "secret-credential"
        env: dict[str, str] = {}
        formed.export(env)
        assert env == {
            "RANK": "4", "WORLD_SIZE": "5", "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
            "GROUP_WORLD_SIZE": "2", "ROLE_RANK": "4", "ROLE_WORLD_SIZE": "5",
            "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
            "MUSTER_STORE_ENDPOINT": "10.0.0.1:29400",
            "MUSTER_STORE_PREFIX": "job-42/2/", "MUSTER_ROUND": "7",
            "TORCHELASTIC_RESTART_COUNT": "2",
            "MUSTER_STORE_TOKEN": "secret-credential"}
        assert not self.channel.changed_since(formed)

        changing = harness.control_golden("round-changing.golden")
        with open(os.path.join(self.dir, "round"), "w") as f:
            f.write(changing)
        data = self.channel.read()
        assert data is not None
        assert (data["seq"], data["state"], data["round"]) == (
            2, "changing", 7)
        assert "store_token" not in data
        assert self.channel.current_running() is None
        assert self.channel.changed_since(formed)
        assert self.channel.describe().endswith(
            "says round 7 is changing (seq 2): node b lost")

        # The tests' writer (harness.write_round) writes the same bytes.
        assert harness.round_text(**json.loads(running)) == running
        assert harness.round_text(**json.loads(changing)) == changing
        assert set(harness.ROUND_FIELDS) | {"store_token"} == set(
            json.loads(running))

    def test_partial_or_missing_file_is_no_change(self) -> None:
        formed = _control.Round({"round": 1, "rank": 0, "world_size": 1},
                                seq=1)
        assert not self.channel.changed_since(formed)
        with open(os.path.join(self.dir, "round"), "w") as f:
            f.write('{"version": 1, "seq": 2, "state": "chan')
        assert not self.channel.changed_since(formed)
        assert self.channel.read() is None

    def test_wait_running_after(self) -> None:
        write_round(self.dir, seq=5, round=2, state="changing")
        began = time.monotonic()
        assert self.channel.wait_running_after(
            2, time.monotonic() + 0.05) is None
        assert time.monotonic() - began < 5
        write_round(self.dir, seq=6, round=3, rank=1, world_size=2,
                    store_token="secret-token", master_addr="h",
                    master_port=29500)
        nxt = self.channel.wait_running_after(2, time.monotonic() + 5)
        assert (nxt.round, nxt.rank, nxt.world_size) == (3, 1, 2)
        assert "secret-token" not in repr(nxt)
        env = {"MUSTER_STORE_TOKEN": "old"}
        nxt.export(env)
        assert env["RANK"] == "1"
        assert env["WORLD_SIZE"] == "2"
        assert env["MASTER_PORT"] == "29500"
        assert env["MUSTER_ROUND"] == "3"
        assert env["MUSTER_STORE_TOKEN"] == "secret-token"

    def test_hello(self) -> None:
        self.channel.write_hello("muster.torch")
        path = os.path.join(self.dir, "hello")
        with open(path) as f:
            hello = json.load(f)
        assert hello == {"version": 1, "pid": os.getpid(),
                         "library": "muster.torch"}
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert not os.path.exists(path + ".tmp")

    def test_round_from_env_names_what_is_missing(self) -> None:
        with pytest.raises(ValueError, match="RANK is not set"):
            _control.Round.from_env({"WORLD_SIZE": "2"})
        with pytest.raises(ValueError, match="WORLD_SIZE='x' is no int"):
            _control.Round.from_env({"RANK": "0", "WORLD_SIZE": "x"})
        r = _control.Round.from_env({"RANK": "1", "WORLD_SIZE": "2",
                                     "MUSTER_ROUND": "4",
                                     "MUSTER_STORE_PREFIX": "j/4"})
        assert (r.rank, r.world_size, r.round, r.store_prefix) == (1, 2, 4, "j/4")

