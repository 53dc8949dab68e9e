"""Section 1's reduce in the shape `auto` chooses at 1,000,000 msg/s, and its row of the model check (issue 37)."""

from benchmarks.report import _auto_shape_lines, _auto_shape_model_row
from benchmarks.write_cost import ReduceShape, WorkloadEvents, WriteCostResult
from benchmarks.write_units import StageWriteCost
from planner.inputs import Settings, Workload
from planner.model import plan_capacity
from planner.prices import load_price_table
from planner.reduce import transactions_per_delta_batch

SHAPE = ReduceShape(rate=1_000_000, slices=128, batch_size=46)


def result(messages: int, invocations: tuple[int, ...], auto_units: int, ten_units: int) -> WriteCostResult:
    return WriteCostResult(
        messages=messages,
        mean_record_bytes=190.0,
        state_changes=int(messages * 0.85),
        delta_batches=sum(invocations),
        reduce_invocations=4,
        stages={
            f"reduce ({SHAPE.label})": StageWriteCost(requests=4, items=400, write_units=auto_units),
            "reduce (crt+marker)": StageWriteCost(requests=8, items=500, write_units=ten_units),
        },
        original={},
        original_large={},
        exact={SHAPE.label: True},
        transaction_ms_median=20.0,
        delta_item_bytes_median=5000.0,
        original_oversized_transactions=0,
        events=WorkloadEvents(),
        auto_shape=SHAPE,
        auto_invocations=invocations,
    )


def test_the_auto_shape_is_a_table_beside_batches_of_10_and_says_it_is_exact() -> None:
    text = "\n".join(_auto_shape_lines(result(4000, (35,), 700, 1030)))
    assert "reduced once more (`crt+marker`, exact) as `auto` reduces them at 1,000,000 msg/s: 128 slices" in text
    assert "(35 here)" in text
    assert "| reduce, 128 slices, batches of 46 | 0.0010 | 0.1750 |" in text
    assert "| reduce, 1 slice, batches of 10 (above) | 0.0020 | 0.2575 |" in text
    unshaped = result(4000, (35,), 700, 1030)
    unshaped.auto_shape = None
    assert _auto_shape_lines(unshaped) == []


def test_the_model_row_counts_the_runs_own_invocations_with_the_planners_packing() -> None:
    plan = plan_capacity(Workload(rate=50_000), Settings(), prices=load_price_table())
    run = result(4000, (46, 12), 900, 1030)
    (row,) = _auto_shape_model_row(run, plan)
    units = 0.0
    for batches in (46, 12):
        per_batch, actions = transactions_per_delta_batch(plan.workload, 100.0, batches, markers=True)
        units += per_batch * batches * actions * 2
    model = units / (100.0 * 58 / plan.workload.applied_share)
    assert (
        row
        == f"| ours, `auto` at 1,000,000 msg/s in the benchmark's invocations (128 slices) | | | {model:.3f} / 0.225 |"
    )
