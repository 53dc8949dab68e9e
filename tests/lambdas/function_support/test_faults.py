"""Fault injection: `..._FIRST` fails exactly the first N after-write points of an execution environment."""

from __future__ import annotations

import pytest

from function_support import faults
from function_support.faults import FailurePoint, InjectedFailure, maybe_inject_failure
from local.runner.invoker import fault_injection_overrides, injected_failure_point


@pytest.fixture(autouse=True)
def fresh_execution_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faults, "_after_write_failures_injected", {})
    for name in ("FAILURE_REDUCE_LAMBDA_PCT", "FAILURE_REDUCE_LAMBDA_AFTER_WRITE_PCT"):
        monkeypatch.delenv(name, raising=False)


def outcomes(point: FailurePoint, invocations: int) -> list[bool]:
    failed = []
    for _ in range(invocations):
        try:
            maybe_inject_failure("REDUCE", point)
            failed.append(False)
        except InjectedFailure:
            failed.append(True)
    return failed


def test_the_first_n_invocations_fail_after_their_writes_and_no_later_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAILURE_REDUCE_LAMBDA_AFTER_WRITE_FIRST", "2")
    assert outcomes(FailurePoint.BEFORE_WRITE, 3) == [False, False, False]
    assert outcomes(FailurePoint.AFTER_WRITE, 5) == [True, True, False, False, False]


def test_the_runner_counts_it_as_an_after_write_fault_and_passes_the_variable_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAILURE_REDUCE_LAMBDA_AFTER_WRITE_FIRST", "1")
    with pytest.raises(InjectedFailure) as raised:
        maybe_inject_failure("REDUCE", FailurePoint.AFTER_WRITE)
    error = {"errorType": "InjectedFailure", "errorMessage": str(raised.value)}
    assert injected_failure_point(error) == "after_write"
    assert fault_injection_overrides({"FAILURE_REDUCE_LAMBDA_AFTER_WRITE_FIRST": "1", "OTHER": "x"}) == {
        "FAILURE_REDUCE_LAMBDA_AFTER_WRITE_FIRST": "1"
    }


@pytest.mark.parametrize("raw", ["-1", "1.5", "x"])
def test_a_bad_count_fails_the_invocation_rather_than_counting_as_zero(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("FAILURE_REDUCE_LAMBDA_AFTER_WRITE_FIRST", raw)
    with pytest.raises(ValueError, match="FAILURE_REDUCE_LAMBDA_AFTER_WRITE_FIRST"):
        maybe_inject_failure("REDUCE", FailurePoint.AFTER_WRITE)
