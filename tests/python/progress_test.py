"""muster.progress, the progress file written from Python: the layout
libmuster_comm writes (tests/testdata/progress/fresh.golden, which
comm_collectives_test checks against the C++ writer), the speed counters
(work outside collectives, waiting inside), and nothing at all without
MUSTER_PROGRESS_FILE."""

from __future__ import annotations

import os
import re
import tempfile
import time
from typing import Dict

import pytest

from muster import progress

GOLDEN = os.path.join(os.environ.get("MUSTER_SOURCE_DIR", "."),
                      "tests", "testdata", "progress", "fresh.golden")


def fields(path: str) -> Dict[str, str]:
    with open(path, "rb") as f:
        text = f.read().decode("ascii")
    out = {}
    for line in text.splitlines()[1:]:
        name, _, value = line.partition(" ")
        if name:
            out[name] = value.strip()
    return out


def test_a_fresh_file_has_libmuster_comms_layout() -> None:
    path = os.path.join(tempfile.mkdtemp(), "progress")
    progress.ProgressFile(path)
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) == progress.SIZE == 512
    header, rest = data[:len(b"muster-progress 2")], data[len(b"muster-progress 2"):]
    masked = header + re.sub(rb"[0-9]", b"0", rest)
    with open(GOLDEN, "rb") as f:
        assert masked == f.read()
    assert int(fields(path)["pid"]) == os.getpid()


def test_the_speed_counters_split_work_from_collectives() -> None:
    path = os.path.join(tempfile.mkdtemp(), "progress")
    p = progress.ProgressFile(path)
    for _ in range(3):
        p.begin("AllReduce")
        time.sleep(0.02)   # waiting for the others
        p.end()
        time.sleep(0.1)    # this rank's own work
    p.begin("Broadcast")
    f = fields(path)
    assert f["started"] == "00000000000000000004"
    assert int(f["finished"]) == 3
    assert f["current"] == "Broadcast"
    # Two gaps between collectives (none before the first), ~100 ms each.
    assert 180_000 <= int(f["compute_us"]) < 10_000_000
    assert 50_000 <= int(f["wait_us"]) < 10_000_000
    assert abs(int(f["updated_unix_ms"]) - time.time() * 1000) < 60_000
    p.end()
    p.report()
    f = fields(path)
    assert f["current"] == "-" and int(f["since_unix_ms"]) == 0
    assert int(f["reported"]) == 1


def test_without_the_variable_nothing_is_written(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MUSTER_PROGRESS_FILE", raising=False)
    monkeypatch.setattr(progress, "_file", None)
    with progress.collective("AllReduce"):
        pass
    progress.report()
    assert progress.current() is None


def test_the_module_functions_write_the_variables_file(
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = os.path.join(tempfile.mkdtemp(), "progress")
    monkeypatch.setenv("MUSTER_PROGRESS_FILE", path)
    monkeypatch.setattr(progress, "_file", None)
    with progress.collective("AllGather"):
        pass
    assert int(fields(path)["finished"]) == 1
