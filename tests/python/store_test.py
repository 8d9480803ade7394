"""muster.torch.MusterStore against a real musterd: every op torch's c10d
calls, straight and through torch's own PrefixStore (c10d's C++ calling the
Python methods), wait timeouts, and the errors' words. The tests of the
Store client alone (no torch) run wherever Python does."""

from __future__ import annotations

import datetime
import os
import threading
import time
from typing import Any, Iterator

import pytest

import harness
from muster import _client


@pytest.fixture(scope="class")
def musterd() -> Iterator[harness.Musterd]:
    server = harness.Musterd()
    yield server
    server.kill()


class StoreTest:
    @pytest.fixture(autouse=True)
    def server(self, musterd: harness.Musterd) -> None:
        self.musterd = musterd

    def make(self, prefix: str,
             timeout: datetime.timedelta = datetime.timedelta(seconds=10)
             ) -> Any:
        import muster.torch
        client = _client.StoreClient(self.musterd.endpoint, prefix)
        return muster.torch.MusterStore(client, timeout)

    @harness.require("torch")
    def test_set_get_add_check_delete(self) -> None:
        s = self.make("job/1")
        s.set("a", b"1")
        s.set("b", "text")  # a Python caller may pass str
        assert s.get("a") == b"1"
        assert s.get("b") == b"text"
        assert s.add("n", 5) == 5
        assert s.add("n", 3) == 8
        assert s.get("n") == b"8"  # decimal, as c10d's stores
        assert s.check(["a", "n"])
        assert not s.check(["a", "missing"])
        assert s.num_keys() == 3
        assert s.delete_key("a")
        assert not s.delete_key("a")
        assert s.num_keys() == 2

    @harness.require("torch")
    def test_compare_set(self) -> None:
        s = self.make("job/2")
        # Absent and expected empty: set.
        assert s.compare_set("k", b"", b"v1") == b"v1"
        # A mismatch returns the value stored; a match swaps.
        assert s.compare_set("k", b"other", b"v2") == b"v1"
        assert s.compare_set("k", b"v1", b"v2") == b"v2"
        # torch 1.13's trampoline passes lists of ints.
        assert s.compare_set("k", list(b"v2"), list(b"v3")) == b"v3"

    @harness.require("torch")
    def test_through_torch_prefix_store(self) -> None:
        import torch.distributed as dist
        s = self.make("job/3")
        p = dist.PrefixStore("pg", s)  # C++ calls the Python methods
        p.set("x", "1")
        assert p.get("x") == b"1"
        assert p.add("c", 2) == 2
        assert p.compare_set("x", "1", "2") == b"2"
        p.wait(["x"])
        p.wait(["x"], datetime.timedelta(seconds=1))
        assert p.num_keys() == 2
        assert p.delete_key("x")
        assert s.get("pg/c") == b"2"

    @harness.require("torch")
    def test_wait_blocks_until_set_and_times_out(self) -> None:
        s = self.make("job/4")
        setter = threading.Timer(0.2, lambda: self.make("job/4").set("late",
                                                                     b"1"))
        setter.start()
        s.wait(["late"], datetime.timedelta(seconds=20))
        assert s.get("late") == b"1"
        setter.join()
        began = time.monotonic()
        with pytest.raises(_client.StoreTimeout) as e:
            s.wait(["never"], datetime.timedelta(milliseconds=300))
        assert time.monotonic() - began >= 0.29
        assert time.monotonic() - began < 10
        assert "never" in str(e.value)
        assert isinstance(e.value, RuntimeError)  # torch catches it
        # get waits up to the store's timeout.
        s.set_timeout(datetime.timedelta(milliseconds=200))
        with pytest.raises(_client.StoreTimeout):
            s.get("never")

    def test_unreachable_store_names_the_endpoint(self) -> None:
        port = harness.free_port()
        client = _client.StoreClient(f"127.0.0.1:{port}", "job/5",
                                     failover_timeout=0.5)
        with pytest.raises(_client.StoreError) as e:
            client.set("a", b"1")
        assert f"127.0.0.1:{port}" in str(e.value)
        assert "musterd" in str(e.value)

    def test_bad_endpoint_and_missing_prefix(self) -> None:
        with pytest.raises(_client.StoreError, match="port 'x' is no num"):
            _client.StoreClient("h:x", "p")
        with pytest.raises(_client.StoreError, match="MUSTER_STORE_PREFIX"):
            _client.StoreClient("h:1", "")
        assert _client.parse_endpoints("a:1,b,[::1]:7,:9") == [
            "a:1", "b:29400", "[::1]:7", "127.0.0.1:9"]

    def test_client_without_torch(self) -> None:
        # The client alone: every op, a large value (HTTP/2 flow control
        # both ways), a wait that a second client ends, NOT_FOUND's words.
        c = _client.StoreClient(self.musterd.endpoint, "job/6")
        big = bytes(range(256)) * 4096  # 1 MiB: many frames each way
        c.set("big", big)
        assert c.get("big", 0) == big
        assert c.add("n", -2) == -2
        assert c.compare_set("k", b"", b"v") == b"v"
        assert c.check(["big", "n", "k"])
        assert c.num_keys() == 3
        assert c.delete("k")
        setter = threading.Timer(0.2, lambda: _client.StoreClient(
            self.musterd.endpoint, "job/6").set("late", b"x"))
        setter.start()
        assert c.get("late", 20) == b"x"
        setter.join()
        with pytest.raises(_client.StoreError, match="NOT_FOUND") as e:
            c.get("absent", 0)
        assert e.value.code == _client.StatusCode.NOT_FOUND

    def test_client_survives_a_musterd_restart(self) -> None:
        # A pooled connection whose server went away is noticed before a
        # call is sent on it: even an Add (never repeated after a broken
        # call) goes to the new server without an error.
        port = harness.free_port()
        endpoint = f"127.0.0.1:{port}"

        def start() -> harness.Child:
            server = harness.Child([os.path.join(harness.BIN_DIR, "musterd"),
                                    f"--listen={endpoint}"], tag="musterd")
            server.wait_for("listening on", 30)
            return server

        first = start()
        try:
            c = _client.StoreClient(endpoint, "job/7", failover_timeout=10)
            assert c.add("n", 1) == 1
        finally:
            first.kill()
        second = start()
        try:
            assert c.add("n", 1) == 1  # a new server: a new count
            c.set("k", b"v")
            assert c.get("k", 0) == b"v"
        finally:
            second.kill()
