"""Helpers of the Python tests (and of bench/torch_recovery.py): musterd as a
child process, skips when a module is missing, children killed at the end,
waits with deadlines. No pytest at import time (the benchmark has none).

The tests run under pytest with ctest's environment: MUSTER_BIN_DIR
(build/bin), MUSTER_SOURCE_DIR, and PYTHONPATH naming the build tree's
package (python/CMakeLists.txt) and this directory.
"""

from __future__ import annotations

import importlib.util
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
