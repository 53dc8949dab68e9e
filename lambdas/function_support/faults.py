"""Fault injection (docs/design.md, "Fault injection").

`FAILURE_<STAGE>_LAMBDA_PCT` fails an invocation before it commits anything;
`FAILURE_<STAGE>_LAMBDA_AFTER_WRITE_PCT` fails it after its writes were
committed, which is the case that proves each stage idempotent. Both are read on
every invocation so the local runtime can change them without a redeploy.

`FAILURE_<STAGE>_LAMBDA_AFTER_WRITE_FIRST` = N fails the first N invocations of each
execution environment after their writes, whatever the random faults do. A negative
control must fail every time it runs, so it cannot rest on a random fault landing after
a commit: with it, a stage that is not idempotent is certain to apply a batch twice.
"""

import os
import random
from enum import Enum


class InjectedFailure(RuntimeError):
    """Raised on purpose; the event source retries the batch as for any error."""


class FailurePoint(Enum):
    BEFORE_WRITE = ""
    AFTER_WRITE = "_AFTER_WRITE"


_after_write_failures_injected: dict[str, int] = {}
"""Per stage, how many invocations of this execution environment `..._FIRST` has failed."""


def failure_variable(stage: str, point: FailurePoint) -> str:
    return f"FAILURE_{stage.upper()}_LAMBDA{point.value}_PCT"


def first_invocations_variable(stage: str) -> str:
    return f"FAILURE_{stage.upper()}_LAMBDA{FailurePoint.AFTER_WRITE.value}_FIRST"


def failure_percentage(stage: str, point: FailurePoint) -> float:
    """The configured percentage, 0 when unset; a bad setting is an error, not a silent 0."""
    name = failure_variable(stage, point)
    raw = os.environ.get(name, "0").strip() or "0"
    try:
        percentage = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None
    if not 0 <= percentage <= 100:
        raise ValueError(f"{name}={raw!r} is outside 0..100")
    return percentage


def first_invocations_to_fail(stage: str) -> int:
    """`FAILURE_<STAGE>_LAMBDA_AFTER_WRITE_FIRST`, 0 when unset; a bad setting is an error."""
    name = first_invocations_variable(stage)
    raw = os.environ.get(name, "0").strip() or "0"
    if not raw.isdigit():
        raise ValueError(f"{name}={raw!r} is not a whole number of invocations")
    return int(raw)


def maybe_inject_failure(stage: str, point: FailurePoint) -> None:
    """Raise `InjectedFailure` with the configured probability, or for the first invocations."""
    if point is FailurePoint.AFTER_WRITE:
        failed = _after_write_failures_injected.get(stage, 0)
        if failed < (first := first_invocations_to_fail(stage)):
            _after_write_failures_injected[stage] = failed + 1
            raise InjectedFailure(
                f"injected {stage} failure ({first_invocations_variable(stage)}={first}: "
                f"invocation {failed + 1} of this execution environment)"
            )
    percentage = failure_percentage(stage, point)
    if percentage and random.uniform(0, 100) < percentage:
        raise InjectedFailure(f"injected {stage} failure ({failure_variable(stage, point)}={percentage:g})")
