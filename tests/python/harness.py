"""Helpers of the Python tests: musterd as a child process, skips when torch
or grpc is missing, children killed at the end, waits with deadlines.

The tests run with ctest's environment: MUSTER_BIN_DIR (build/bin),
MUSTER_SOURCE_DIR, and PYTHONPATH naming the build tree's package
(python/CMakeLists.txt).
"""

import importlib.util
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import unittest

BIN_DIR = os.environ.get("MUSTER_BIN_DIR", "")
SOURCE_DIR = os.environ.get("MUSTER_SOURCE_DIR", "")


def require(*modules):
    """Skips the test case when a module cannot be imported."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    return unittest.skipIf(bool(missing), f"{', '.join(missing)} not "
                           "installed (python3-torch, python3-grpcio)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout, what):
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

    def __init__(self, argv, env=None, tag="child"):
        self.log = tempfile.NamedTemporaryFile(prefix=f"muster-{tag}-",
                                               suffix=".log", delete=False)
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL,
                                     start_new_session=True)

    @property
    def pid(self):
        return self.proc.pid

    def output(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def wait_for(self, pattern, timeout):
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

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"did not exit within {timeout} s:\n"
                                 f"{self.output()}") from None

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


class Musterd(Child):
    """musterd on 127.0.0.1 and a free port, serving when constructed."""

    def __init__(self, flags=()):
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        super().__init__([os.path.join(BIN_DIR, "musterd"),
                          f"--listen={self.endpoint}", *flags], tag="musterd")
        self.wait_for("listening on", 30)
