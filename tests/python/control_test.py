"""The worker side of the control channel (muster._control) against files
written as the agent writes them: round_changed's rule, the 2 ms wait for a
running round, hello, and a partial file read as "no change"."""

import json
import os
import stat
import tempfile
import time
import unittest

from muster import _control


def write_round(directory, **fields):
    """As the agent: round.tmp, then rename over round."""
    body = {"version": 1, "state": "running", "round": 1, "rank": 0,
            "world_size": 2, "store_prefix": "job/1"}
    body.update(fields)
    tmp = os.path.join(directory, "round.tmp")
    with open(tmp, "w") as f:
        json.dump(body, f)
    os.replace(tmp, os.path.join(directory, "round"))


class ControlTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="muster-control-")
        self.channel = _control.ControlChannel(self.dir)

    def test_round_changed_follows_the_contract(self):
        write_round(self.dir, seq=1, round=3)
        formed = self.channel.current_running()
        self.assertEqual((formed.round, formed.seq), (3, 1))
        self.assertFalse(self.channel.changed_since(formed))
        # The same seq never counts, whatever it says.
        write_round(self.dir, seq=1, round=3, state="changing")
        self.assertFalse(self.channel.changed_since(formed))
        write_round(self.dir, seq=2, round=3, state="changing",
                    reason="node b lost")
        self.assertTrue(self.channel.changed_since(formed))
        self.assertIn("node b lost", self.channel.describe())
        # A later running round counts; a rewrite of the same round does not.
        write_round(self.dir, seq=3, round=4)
        self.assertTrue(self.channel.changed_since(formed))
        write_round(self.dir, seq=4, round=3)
        self.assertFalse(self.channel.changed_since(formed))

    def test_partial_or_missing_file_is_no_change(self):
        formed = _control.Round({"round": 1, "rank": 0, "world_size": 1},
                                seq=1)
        self.assertFalse(self.channel.changed_since(formed))
        with open(os.path.join(self.dir, "round"), "w") as f:
            f.write('{"version": 1, "seq": 2, "state": "chan')
        self.assertFalse(self.channel.changed_since(formed))
        self.assertIsNone(self.channel.read())

    def test_wait_running_after(self):
        write_round(self.dir, seq=5, round=2, state="changing")
        began = time.monotonic()
        self.assertIsNone(self.channel.wait_running_after(
            2, time.monotonic() + 0.05))
        self.assertLess(time.monotonic() - began, 5)
        write_round(self.dir, seq=6, round=3, rank=1, world_size=2,
                    store_token="secret-token", master_addr="h",
                    master_port=29500)
        nxt = self.channel.wait_running_after(2, time.monotonic() + 5)
        self.assertEqual((nxt.round, nxt.rank, nxt.world_size), (3, 1, 2))
        self.assertNotIn("secret-token", repr(nxt))
        env = {"MUSTER_STORE_TOKEN": "old"}
        nxt.export(env)
        self.assertEqual(env["RANK"], "1")
        self.assertEqual(env["WORLD_SIZE"], "2")
        self.assertEqual(env["MASTER_PORT"], "29500")
        self.assertEqual(env["MUSTER_ROUND"], "3")
        self.assertEqual(env["MUSTER_STORE_TOKEN"], "secret-token")

    def test_hello(self):
        self.channel.write_hello("muster.torch")
        path = os.path.join(self.dir, "hello")
        with open(path) as f:
            hello = json.load(f)
        self.assertEqual(hello, {"version": 1, "pid": os.getpid(),
                                 "library": "muster.torch"})
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        self.assertFalse(os.path.exists(path + ".tmp"))

    def test_round_from_env_names_what_is_missing(self):
        with self.assertRaisesRegex(ValueError, "RANK is not set"):
            _control.Round.from_env({"WORLD_SIZE": "2"})
        with self.assertRaisesRegex(ValueError, "WORLD_SIZE='x' is no int"):
            _control.Round.from_env({"RANK": "0", "WORLD_SIZE": "x"})
        r = _control.Round.from_env({"RANK": "1", "WORLD_SIZE": "2",
                                     "MUSTER_ROUND": "4",
                                     "MUSTER_STORE_PREFIX": "j/4"})
        self.assertEqual((r.rank, r.world_size, r.round, r.store_prefix),
                         (1, 2, 4, "j/4"))


if __name__ == "__main__":
    unittest.main()
