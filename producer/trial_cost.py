"""What a load test sent to AWS will cost, shown before it starts and confirmed above a threshold.

`producer send` against a deployed stack prints the planner's estimate (`planner.load_test`) of
the run it is about to send and refuses, in one line, to send one estimated above
`CONFIRM_ABOVE_USD` without `--yes`: a mistyped rate or duration should not become a bill.
"""

from __future__ import annotations

from planner.load_test import CONFIRM_ABOVE_USD, FLAT_OUT_RATE, LoadTestCost, describe, load_test_cost
from producer.generator import DEFAULT_COUNT


def estimate(rate: float, count: int | None, duration: float | None) -> LoadTestCost:
    """The cost of `send` with these options (rate 0, as fast as possible: `FLAT_OUT_RATE`)."""
    pace = rate if rate > 0 else FLAT_OUT_RATE
    seconds = duration if duration is not None else (count or DEFAULT_COUNT) / pace
    return load_test_cost(pace, seconds)


def refusal(cost: LoadTestCost, confirmed: bool) -> str | None:
    """The one-line refusal of an unconfirmed run above the threshold; None to go ahead."""
    if confirmed or cost.usd <= CONFIRM_ABOVE_USD:
        return None
    return (
        f"this load test costs about ${cost.usd:,.2f}, more than ${CONFIRM_ABOVE_USD:,.2f}: "
        "pass --yes to send it (or lower --rate, --count or --duration)"
    )


__all__ = ["describe", "estimate", "refusal"]
