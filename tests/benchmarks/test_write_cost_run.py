"""The write-cost benchmark end to end on a small workload: every way it maps and reduces stays exact.

`make bench` is the only other caller; without this test a broken benchmark is found only
when someone runs it.
"""

from benchmarks.write_cost import LARGE_MAP_LABEL, MODES, run_write_cost


def test_a_small_write_cost_run_is_exact_in_every_mode(aws_environment: str) -> None:
    result = run_write_cost(300, lambda _stage, _fraction: None)
    assert result.messages == 300
    assert set(result.exact) == {*MODES, LARGE_MAP_LABEL}
    assert all(result.exact.values()), result.exact
    state = result.stages["state"]
    assert 0 < state.requests <= result.messages, "one request per state change at most"
