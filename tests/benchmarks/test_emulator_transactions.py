"""The emulator-transaction benchmark measures both rollback paths and reports their ratios."""

from __future__ import annotations

from benchmarks.emulator_transactions import MOTOS_OWN, OURS, run_emulator_transactions
from benchmarks.report import _emulator_transactions_section


def test_both_paths_are_measured_at_every_size_and_rendered_with_their_ratio_to_the_empty_table() -> None:
    steps: list[tuple[str, float]] = []
    result = run_emulator_transactions(lambda step, done: steps.append((step, done)), (0, 50), (0, 20))
    assert [(r.implementation, r.table_items) for r in result.latencies] == [
        (OURS, 0),
        (OURS, 50),
        (MOTOS_OWN, 0),
        (MOTOS_OWN, 20),
    ]
    assert all(r.median_ms > 0 for r in result.latencies) and steps[-1][1] == 1.0
    assert result.ratio_to_empty(OURS, 0) == 1.0
    section = "\n".join(_emulator_transactions_section(result))
    assert "| journal (ours) | 50 |" in section and "| moto 5.2.5 | 20 |" in section and "against 50 items" in section
