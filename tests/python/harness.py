"""Helpers of the Python tests (and of bench/torch_recovery.py): musterd as a
child process, skips when a module is missing, children killed at the end,
waits with deadlines. No pytest at import time (the benchmark has none).

The tests run under pytest with ctest's environment: MUSTER_BIN_DIR
(build/bin), MUSTER_SOURCE_DIR, and PYTHONPATH naming the build tree's
package (python/CMakeLists.txt) and this directory.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from typing import Any, Callable, Mapping, Optional, Sequence, TypeVar

T = TypeVar("T")

BIN_DIR = os.environ.get("MUSTER_BIN_DIR", "")
SOURCE_DIR = os.environ.get("MUSTER_SOURCE_DIR", "")


def require(*modules: str) -> Any:
    """A pytest mark that skips the test (or class) when a module cannot be
    imported, naming the Debian package."""
    import pytest
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} "
                              "not installed (Debian: python3-torch)")


# The control channel's `round` as the agent writes it. The one codec is C++'s
# (common/include/muster/common/control_round.h); its bytes are
# tests/testdata/control/*.golden, against which control_test.py checks
# round_text. Every field the agent always writes, with a worker's defaults;
# store_token and reason are written only when not empty.
ROUND_FIELDS: Mapping[str, Any] = {
    "version": 1, "seq": 1, "state": "running", "round": 1, "rank": 0,
    "world_size": 1, "local_rank": 0, "local_world_size": 1,
    "group_rank": 0, "group_world_size": 1, "role_rank": 0,
    "role_world_size": 1, "master_addr": "", "master_port": 0,
    "store_endpoint": "", "store_prefix": "", "restart_count": 0,
}


def control_golden(name: str) -> str:
    """tests/testdata/control/`name`, the codec's golden bytes."""
    path = os.path.join(SOURCE_DIR, "tests", "testdata", "control", name)
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def round_text(**fields: Any) -> str:
    """The bytes of `round` as the agent's codec writes them: ROUND_FIELDS
    updated with `fields` as one line of JSON (keys sorted, no spaces), then
    a newline."""
    body = dict(ROUND_FIELDS)
    body.update(fields)
    for optional in ("store_token", "reason"):
        if body.get(optional) == "":
            del body[optional]
    return json.dumps(body, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False) + "\n"


def write_round(directory: str, **fields: Any) -> None:
    """Plays the agent: round_text(**fields) into round.tmp (mode 0600), then
    renamed over `round`."""
    tmp = os.path.join(directory, "round.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, round_text(**fields).encode())
    finally:
        os.close(fd)
    os.replace(tmp, os.path.join(directory, "round"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate: Callable[[], T], timeout: float, what: str) -> T:
    """Polls predicate every 10 ms; AssertionError naming `what` at timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"{what} within {timeout} s")


class Child:
    """A child process in its own process group, output to a file; the group
    is killed by kill() (and by the test's cleanup)."""

    def __init__(self, argv: Sequence[str],
                 env: Optional[Mapping[str, str]] = None,
                 tag: str = "child") -> None:
        self.log = tempfile.NamedTemporaryFile(prefix=f"muster-{tag}-",
                                               suffix=".log", delete=False)
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL,
                                     start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def wait_for(self, pattern: str, timeout: float) -> "re.Match[str]":
        """The first match of regex `pattern` in the output, waiting up to
        `timeout` s; AssertionError with the output otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(pattern, self.output())
            if m:
                return m
            if time.monotonic() > deadline or self.proc.poll() is not None:
                m = re.search(pattern, self.output())
                if m:
                    return m
                raise AssertionError(f"no '{pattern}' within {timeout} s "
                                     f"(exit {self.proc.poll()}):\n"
                                     f"{self.output()}")
            time.sleep(0.01)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"did not exit within {timeout} s:\n"
                                 f"{self.output()}") from None

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


class Musterd(Child):
    """musterd on 127.0.0.1 and a free port, serving when constructed."""

    def __init__(self, flags: Sequence[str] = ()) -> None:
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        super().__init__([os.path.join(BIN_DIR, "musterd"),
                          f"--listen={self.endpoint}", *flags], tag="musterd")
        self.wait_for("listening on", 30)
