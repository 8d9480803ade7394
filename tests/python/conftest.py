"""pytest's hooks for tests/python: a file whose tests were all skipped (no
torch here, no python3-venv) exits 77, which ctest reports as skipped
(SKIP_RETURN_CODE in tests/python/CMakeLists.txt), not as passed."""

from __future__ import annotations

from typing import Dict

import pytest

SKIPPED_EXIT_CODE = 77
_outcomes: Dict[str, int] = {"passed": 0, "failed": 0, "skipped": 0}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or report.outcome != "passed":
        _outcomes[report.outcome] = _outcomes.get(report.outcome, 0) + 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if (exitstatus == 0 and _outcomes["skipped"] and
            not _outcomes["passed"] and not _outcomes["failed"]):
        session.exitstatus = SKIPPED_EXIT_CODE
