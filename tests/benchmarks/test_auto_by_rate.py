"""Section 5 prints `auto`'s plan at every declared rate and says whether the cost per message is flat (issue 37)."""

from __future__ import annotations

from benchmarks.archive_cost import DECLARED_RATES
from benchmarks.report import auto_by_rate_section, auto_by_rate_summary, auto_plans_by_rate
from planner.prices import load_price_table


def test_the_plans_at_every_declared_rate_are_flat_and_within_the_busy_target() -> None:
    plans = auto_plans_by_rate(load_price_table())
    assert [p.spiky.workload.rate for p in plans] == list(DECLARED_RATES)
    section = "\n".join(auto_by_rate_section(plans))
    for profiles in plans:
        row = f"| {profiles.spiky.workload.rate:,.0f} | {profiles.spiky.plan.monthly_usd:,.0f} | "
        assert row in section
        assert all(timing.busy <= 0.7 for timing in profiles.spiky.plan.timings), profiles.spiky.workload.rate
    assert plans[-1].spiky.per_million_usd <= plans[0].spiky.per_million_usd
    assert plans[-1].steady.per_million_usd <= plans[0].steady.per_million_usd
    assert "within 70% busy at every rate" in section and "**flat in the rate**." in section
    (summary,) = auto_by_rate_summary(plans)
    assert summary.endswith("the cost per message does not grow with the rate.")


def test_a_cost_per_message_that_grows_is_said_so() -> None:
    """Read from 1,000,000 msg/s down to 50,000, the last plan costs more a message than the first: said so."""
    plans = list(reversed(auto_plans_by_rate(load_price_table())))
    assert plans[-1].spiky.per_million_usd > plans[0].spiky.per_million_usd, "the check is not vacuous"
    assert "**higher at the higher rate**." in "\n".join(auto_by_rate_section(plans))
    (summary,) = auto_by_rate_summary(plans)
    assert summary.endswith("the cost per message **grows** with the rate.")
    assert auto_by_rate_section([]) == [] == auto_by_rate_summary([])
