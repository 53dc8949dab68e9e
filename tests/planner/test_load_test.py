"""A load test's cost and the stack's idle cost: the arithmetic, and that the README says the same."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.load_test import (
    CONFIRM_ABOVE_USD,
    FLAT_OUT_RATE,
    IdleResources,
    describe,
    idle_costs,
    load_test_cost,
    main,
)
from planner.prices import load_price_table
from producer.trial_cost import estimate, refusal
from tests.stacks.stack_helpers import REPOSITORY_ROOT

PRICES = load_price_table()


def test_the_idle_stack_bills_its_stream_hours_alarms_and_dashboard() -> None:
    costs = {component.name: component.monthly_usd for component in idle_costs(prices=PRICES)}
    assert costs["Kinesis on-demand stream"] == pytest.approx(730 * 0.04)  # about $29 a month
    assert costs["CloudWatch alarms"] == pytest.approx(8 * 0.10)
    assert costs["CloudWatch dashboard"] == pytest.approx(3.00)
    assert costs["KMS customer managed keys"] == pytest.approx(1.00)  # the alarm topic's key
    with_key = idle_costs(IdleResources(customer_managed_keys=2), PRICES)  # and customerManagedKey's
    assert sum(c.monthly_usd for c in with_key) - sum(costs.values()) == pytest.approx(1.00)


def test_the_readme_states_the_idle_cost_and_a_trial_that_costs_cents() -> None:
    readme = (REPOSITORY_ROOT / "README.md").read_text()
    idle = sum(component.monthly_usd for component in idle_costs(prices=PRICES))
    assert f"${idle:,.2f} a month" in readme
    trial = re.search(r"producer send --stack-name \S+ --rate (\d+) --duration (\d+)", readme)
    assert trial is not None, "the README's trial path names its load test"
    cost = load_test_cost(float(trial[1]), float(trial[2]), prices=PRICES)
    assert cost.usd < CONFIRM_ABOVE_USD, "the trial runs without --yes"
    assert f"${cost.usd:,.2f}" in readme


@settings(max_examples=25)
@given(st.floats(min_value=10, max_value=20_000), st.floats(min_value=10, max_value=3600))
def test_twice_as_long_costs_about_twice_as_much(rate: float, seconds: float) -> None:
    once = load_test_cost(rate, seconds, prices=PRICES)
    twice = load_test_cost(rate, 2 * seconds, prices=PRICES)
    assert once.usd > 0 and once.messages == round(rate * seconds)
    # Metrics bill by the started hour, so doubling never costs more than twice plus an hour of them.
    assert once.usd < twice.usd <= 2 * once.usd + 22 * 0.30 / 730 + 1e-9


def test_a_big_test_is_refused_without_yes_and_a_small_one_is_not() -> None:
    big = estimate(50_000, None, 200)
    assert big.messages == 10_000_000 and big.usd > CONFIRM_ABOVE_USD
    message = refusal(big, confirmed=False)
    assert message is not None and "--yes" in message and f"${big.usd:,.2f}" in message
    assert refusal(big, confirmed=True) is None
    small = estimate(100, 3000, None)
    assert small.seconds == 30 and refusal(small, confirmed=False) is None
    assert estimate(0, 50_000, None).rate == FLAT_OUT_RATE
    assert describe(small, PRICES)[0].startswith("load test: 3,000 messages at 100 msg/s for 30 s costs about $")


def test_the_command_prints_the_estimate_and_refuses_nonsense(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--rate", "1000", "--duration", "300"]) == 0
    assert "load test: 300,000 messages" in capsys.readouterr().out
    for arguments, message in (
        (["--rate", "0", "--duration", "10"], "argument --rate: must be between 0.001 and 1e+07, got 0"),
        (["--rate", "inf", "--duration", "10"], "argument --rate: must be a finite number, got inf"),
        (["--rate", "nan", "--duration", "10"], "argument --rate: must be a finite number, got nan"),
        (["--rate", "10", "--duration", "nan"], "argument --duration: must be a finite number, got nan"),
        (["--rate", "1e300", "--duration", "1e300"], "argument --rate: must be between 0.001 and 1e+07, got 1e300"),
    ):
        with pytest.raises(SystemExit) as exited:
            main(arguments)
        assert exited.value.code == 2
        error = capsys.readouterr().err
        assert error.startswith(f"planner: error: {message} (see `python -m planner.load_test --help`)")
        assert error.count("\n") == 1
