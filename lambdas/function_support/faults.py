"""Fault injection (docs/design.md, "Fault injection").

`FAILURE_<STAGE>_LAMBDA_PCT` fails an invocation before it commits anything;
`FAILURE_<STAGE>_LAMBDA_AFTER_WRITE_PCT` fails it after its writes were
committed, which is the case that proves each stage idempotent. Both are read on
every invocation so the local runtime can change them without a redeploy.
"""

import os
import random
from enum import Enum


class InjectedFailure(RuntimeError):
    """Raised on purpose; the event source retries the batch as for any error."""


class FailurePoint(Enum):
    BEFORE_WRITE = ""
    AFTER_WRITE = "_AFTER_WRITE"


def failure_variable(stage: str, point: FailurePoint) -> str:
    return f"FAILURE_{stage.upper()}_LAMBDA{point.value}_PCT"


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


def maybe_inject_failure(stage: str, point: FailurePoint) -> None:
    """Raise `InjectedFailure` with the configured probability."""
    percentage = failure_percentage(stage, point)
    if percentage and random.uniform(0, 100) < percentage:
        raise InjectedFailure(f"injected {stage} failure ({failure_variable(stage, point)}={percentage:g})")
