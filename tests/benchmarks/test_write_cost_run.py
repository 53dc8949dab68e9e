"""The write-cost and handler-overhead benchmarks end to end on a small workload.

`make bench` is their only other caller; without this test a broken benchmark is found only
when someone runs it.
"""

from benchmarks.handler_overhead import run_handler_overhead
from benchmarks.write_cost import LARGE_MAP_LABEL, MODES, auto_reduce_shape, run_write_cost


def test_a_small_write_cost_run_is_exact_in_every_mode_and_replays_through_every_handler(aws_environment: str) -> None:
    result = run_write_cost(300, lambda _stage, _fraction: None)
    assert result.messages == 300
    shape = auto_reduce_shape()
    assert result.auto_shape == shape and shape.slices > 1, "issue 37: `auto` at 1,000,000 msg/s slices the totals"
    assert set(result.exact) == {*MODES, LARGE_MAP_LABEL, shape.label}
    assert all(result.exact.values()), result.exact
    assert sum(result.auto_invocations) == result.delta_batches
    assert max(result.auto_invocations) <= shape.batch_size
    in_slices = result.stages[f"reduce ({shape.label})"].write_units
    assert in_slices <= result.stages["reduce (crt+marker)"].write_units, "fuller invocations, the slices adding none"
    state = result.stages["state"]
    assert 0 < state.requests <= result.messages, "one request per state change at most"

    overhead = run_handler_overhead(result.events, passes=1, progress=lambda _stage, _fraction: None)
    assert [h.handler for h in overhead.handlers][:2] == ["state", "map"]
    assert all(h.invocations > 0 for h in overhead.handlers)
    floor = overhead.state_floor
    assert 0 < floor.irreducible_us < min(floor.validated_us, floor.client_path_us), "both add work to the floor"
