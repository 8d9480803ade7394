"""The progress file, written from Python: what libmuster_comm writes for C++
workers (muster/comm/progress.h, format 2), so that the agent's watchdog
(--worker-timeout) and musterd's straggler scores (docs/stragglers.md) see a
Python worker as they see a C++ one.

The file is MUSTER_PROGRESS_FILE (the agent sets it for every worker); without
it every call does nothing. Mark each collective with ``begin()`` / ``end()``
(or ``with collective("AllReduce"):``); time outside collectives counts as the
rank's own work, time inside as communication and waiting. ``report()`` says
"alive" in a long phase with no collective. muster.torch does this for a DDP
model through ``muster.torch.watch_speed(ddp_model)``.

No torch here. Thread-safe (a lock around each update; DDP's hooks complete
on its communication thread).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
import time
from typing import Dict, Iterator, Optional, Tuple

__all__ = ["ProgressFile", "begin", "collective", "current", "end", "report"]

SIZE = 512
_HEADER = "muster-progress 2\n"
# (name, width) in file order: the layout of muster/comm/progress.h.
_FIELDS = (("pid", 10), ("updated_unix_ms", 16), ("started", 20),
           ("finished", 20), ("reported", 20), ("current", 24),
           ("since_unix_ms", 16), ("compute_us", 16), ("wait_us", 16))


def _offsets() -> Dict[str, Tuple[int, int]]:
    at = len(_HEADER)
    out: Dict[str, Tuple[int, int]] = {}
    for name, width in _FIELDS:
        at += len(name) + 1
        out[name] = (at, width)
        at += width + 1
    return out


_AT = _offsets()


class ProgressFile:
    """One mapped progress file; updates are stores into the mapped page."""

    def __init__(self, path: str) -> None:
        text = _HEADER
        for name, width in _FIELDS:
            value = "-".ljust(width) if name == "current" else "0" * width
            text += f"{name} {value}\n"
        text = text.ljust(SIZE - 1) + "\n"
        with open(path, "wb") as f:
            f.write(text.encode("ascii"))
        self._fd = os.open(path, os.O_RDWR)
        self._map = mmap.mmap(self._fd, SIZE)
        self._lock = threading.Lock()
        self._started = self._finished = self._reported = 0
        self._compute_us = self._wait_us = 0
        self._idle_since_ns = 0
        self._busy_since_ns = 0
        with self._lock:
            self._number("pid", os.getpid())
            self._touch(time.time_ns())

    def _number(self, name: str, value: int) -> None:
        at, width = _AT[name]
        self._map[at:at + width] = str(value % 10**width).rjust(
            width, "0").encode("ascii")

    def _text(self, name: str, value: str) -> None:
        at, width = _AT[name]
        self._map[at:at + width] = value[:width].ljust(width).encode(
            "ascii", "replace")

    def _touch(self, now_ns: int) -> None:
        self._number("updated_unix_ms", now_ns // 1_000_000)

    def begin(self, op: str) -> None:
        now = time.time_ns()
        with self._lock:
            if self._started == self._finished:
                if 0 < self._idle_since_ns < now:
                    self._compute_us += (now - self._idle_since_ns) // 1000
                    self._number("compute_us", self._compute_us)
                self._busy_since_ns = now
            self._started += 1
            self._number("started", self._started)
            self._text("current", op)
            self._number("since_unix_ms", now // 1_000_000)
            self._touch(now)

    def end(self) -> None:
        now = time.time_ns()
        with self._lock:
            self._finished += 1
            self._number("finished", self._finished)
            if self._finished >= self._started:
                if now > self._busy_since_ns:
                    self._wait_us += (now - self._busy_since_ns) // 1000
                    self._number("wait_us", self._wait_us)
                self._idle_since_ns = now
                self._text("current", "-")
                self._number("since_unix_ms", 0)
            self._touch(now)

    def report(self) -> None:
        now = time.time_ns()
        with self._lock:
            self._reported += 1
            self._number("reported", self._reported)
            self._touch(now)


_file: Optional[ProgressFile] = None
_file_lock = threading.Lock()


def current() -> Optional[ProgressFile]:
    """The process's progress file (MUSTER_PROGRESS_FILE), or None."""
    global _file
    with _file_lock:
        if _file is None:
            path = os.environ.get("MUSTER_PROGRESS_FILE", "")
            if path:
                _file = ProgressFile(path)
        return _file


def begin(op: str) -> None:
    f = current()
    if f is not None:
        f.begin(op)


def end() -> None:
    f = current()
    if f is not None:
        f.end()


def report() -> None:
    f = current()
    if f is not None:
        f.report()


@contextlib.contextmanager
def collective(op: str) -> Iterator[None]:
    """Marks the block as one collective named ``op``."""
    begin(op)
    try:
        yield
    finally:
        end()
