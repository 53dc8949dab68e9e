"""The reducer-scaling benchmark: each transaction in the slice its token names, both backends, exact totals."""

from __future__ import annotations

import pytest

from benchmarks.reducer_process import EMULATOR, STUBBED
from benchmarks.reducer_scaling import render_section, run_reducer_scaling


@pytest.mark.emulator
def test_a_small_run_measures_both_backends_and_reads_back_exact_totals_from_the_emulator() -> None:
    steps: list[float] = []
    result = run_reducer_scaling(lambda _step, done: steps.append(done), counts=(1, 2), invocations_each=2)
    assert [(row.backend, row.reducers) for row in result.rows] == [
        (STUBBED, 1),
        (STUBBED, 2),
        (EMULATOR, 1),
        (EMULATOR, 2),
    ]
    assert all(row.exact for row in result.rows if row.backend == EMULATOR), (
        "the emulator's totals are what was applied"
    )
    assert [row.messages for row in result.rows] == [2_000, 4_000, 2_000, 4_000]
    assert result.service_time_ms > 0 and steps[-1] == 1.0
    section = "\n".join(render_section(result))
    assert "| 2 | 4,000 |" in section and "EXACT" in section
