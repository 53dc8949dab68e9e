"""Section 5 sets the planner's default service times beside the measured ones and says when a default is faster."""

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from benchmarks.report import SERVICE_FIGURES, service_times_check, service_times_summary, slower_than_planned
from planner.inputs import ServiceTimes

MEASURED_2026_11_28 = ServiceTimes(
    state_messages_per_second=2798.0,
    state_cpu_us_per_message=113.6,
    map_cpu_us_per_record=53.2,
    reduce_cpu_us_per_action=102.7,
    reduce_cpu_us_per_message=4.98,
)
"""What `make bench` measured on 2026-11-28 04:09 UTC (docs/benchmarks.md, sections 2 and 3)."""
SLOWEST_MEASURED = ServiceTimes(
    state_messages_per_second=2615.0,
    state_cpu_us_per_message=122.3,
    map_cpu_us_per_record=126.1,
    reduce_cpu_us_per_action=116.4,
    reduce_cpu_us_per_message=6.48,
)
"""The slowest of each figure measured of the handlers as they now are: the state function's (unchanged
since 2026-11-25) by `make bench` of 2026-11-28 02:10; map's and reduce's (changed at 04:00) by `make bench`
at 04:52, 04:31 and 04:43. `planner.inputs.ServiceTimes` names each."""
DEFAULT_MARGIN = 1.1
"""How much slower than the slowest measurement every default is, at least (issue 37: defaults with a margin)."""
FORMER_DEFAULTS = replace(ServiceTimes(), reduce_cpu_us_per_action=50.0, reduce_cpu_us_per_message=1.0)
"""Defaults below that run's reduce figures, as they once were: the reduce's CPU below what it measured."""


def test_that_run_flags_the_former_reduce_defaults_and_none_of_the_current_ones() -> None:
    assert slower_than_planned(MEASURED_2026_11_28, FORMER_DEFAULTS) == [
        "reduce_cpu_us_per_action",
        "reduce_cpu_us_per_message",
    ]
    assert slower_than_planned(MEASURED_2026_11_28, ServiceTimes()) == []


@given(
    figure=st.sampled_from(SERVICE_FIGURES),
    factor=st.floats(min_value=1.001, max_value=100.0),
)
def test_a_figure_is_flagged_exactly_when_it_was_measured_slower_than_its_default(
    figure: tuple[str, str, bool], factor: float
) -> None:
    field, _label, higher_is_faster = figure
    default = getattr(ServiceTimes(), field)
    slower = replace(ServiceTimes(), **{field: default / factor if higher_is_faster else default * factor})
    faster = replace(ServiceTimes(), **{field: default * factor if higher_is_faster else default / factor})
    assert slower_than_planned(slower, ServiceTimes()) == [field]
    assert slower_than_planned(faster, ServiceTimes()) == []


def test_the_section_shows_both_side_by_side_and_says_what_to_do_when_a_default_is_faster() -> None:
    flagged = "\n".join(service_times_check(MEASURED_2026_11_28, FORMER_DEFAULTS))
    assert "| reduce CPU µs per transaction action (section 3) | 50.00 | 102.70 | **no** |" in flagged
    assert "| map CPU µs per state change (section 3) | 140.00 | 53.20 | yes |" in flagged
    assert "**2 measured slower than the planner's default**" in flagged and "planner/inputs.py" in flagged
    covered = "\n".join(service_times_check(MEASURED_2026_11_28, ServiceTimes()))
    assert "**no**" not in covered and "Every default is at least as slow" in covered


def test_the_summary_names_the_faster_defaults_and_is_silent_when_none_is() -> None:
    (bullet,) = service_times_summary(MEASURED_2026_11_28, FORMER_DEFAULTS)
    assert bullet.startswith("- **The planner's defaults are below this run's measurements** (reduce CPU µs per")
    assert service_times_summary(MEASURED_2026_11_28, ServiceTimes()) == []


def test_every_default_covers_the_slowest_measurement_with_a_margin() -> None:
    """`auto` and the capacity check size deployments with the defaults: each is slower than anything
    measured of the current handlers, by at least `DEFAULT_MARGIN`."""
    assert slower_than_planned(SLOWEST_MEASURED, ServiceTimes()) == []
    for field, label, higher_is_faster in SERVICE_FIGURES:
        default, slowest = getattr(ServiceTimes(), field), getattr(SLOWEST_MEASURED, field)
        margin = slowest / default if higher_is_faster else default / slowest
        assert margin >= DEFAULT_MARGIN, (label, default, slowest)
