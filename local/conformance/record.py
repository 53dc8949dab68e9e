"""pytest plugin: each test's outcome (``passed``, ``failed``, ``skipped``) written to ``--conformance-results``.

A test passes when its setup, call and teardown all pass; it failed when any phase failed
(an error in a fixture included); it is skipped otherwise. xfail counts as skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

_OUTCOMES: dict[str, str] = {}
_RANK = {"passed": 0, "skipped": 1, "failed": 2}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--conformance-results", default=None, help="write each test id's outcome to this JSON file")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    outcome = "skipped" if hasattr(report, "wasxfail") else report.outcome
    known = _OUTCOMES.get(report.nodeid, "passed")
    _OUTCOMES[report.nodeid] = max(known, outcome, key=_RANK.__getitem__)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:  # a module that cannot be imported: every test in it fails
        _OUTCOMES[report.nodeid] = "failed"


def pytest_sessionfinish(session: pytest.Session, exitstatus: Any) -> None:
    target = session.config.getoption("--conformance-results")
    if target:
        Path(target).write_text(json.dumps(dict(sorted(_OUTCOMES.items())), indent=0) + "\n")
