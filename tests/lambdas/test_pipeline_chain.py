"""state → map → reduce chained through the real stream records, against independent totals."""

import random
from decimal import Decimal

import pytest

from local.runner.inprocess import Pipeline, expected_totals, trade_message

PATHS = [
    (risk, desk, region)
    for risk in ("Delta", "Vega", "<b>Gamma</b>")
    for desk in ("FXSpot", "Rates")
    for region in ("AMER", "EMEA", "APAC")
]


def random_workload(
    seed: int,
) -> tuple[list[bytes], dict[str, tuple[Decimal, tuple[str, ...]]], list[tuple[str, int]]]:
    """Messages with duplicates, out-of-order versions, modifications and moves; final states; ids."""
    rng = random.Random(seed)
    messages: list[tuple[str, int, str, tuple[str, ...]]] = []
    for index in range(40):
        trade_id = f"trade-{index}"
        versions = [
            (version, f"{rng.randint(-(10**6), 10**6)}.{rng.randint(0, 99):02d}", rng.choice(PATHS))
            for version in range(rng.randint(1, 4))
        ]
        messages.extend((trade_id, v, value, path) for v, value, path in versions)
        messages.extend(rng.sample([(trade_id, v, value, path) for v, value, path in versions], k=1))  # duplicate
    rng.shuffle(messages)  # out of order
    final: dict[str, tuple[int, Decimal, tuple[str, ...]]] = {}
    for trade_id, version, value, path in messages:
        if trade_id not in final or version > final[trade_id][0]:
            final[trade_id] = (version, Decimal(value), path)
    payloads = [trade_message(t, v, value, path) for t, v, value, path in messages]
    identities = [(t, v) for t, v, _, _ in messages]
    return payloads, {t: (value, path) for t, (_, value, path) in final.items()}, identities


def expected_writes(batches: list[list[tuple[str, int]]]) -> int:
    """State changes written: per batch, each trade's highest version if newer than stored."""
    stored: dict[str, int] = {}
    writes = 0
    for batch in batches:
        newest: dict[str, int] = {}
        for trade_id, version in batch:
            newest[trade_id] = max(version, newest.get(trade_id, -1))
        for trade_id, version in newest.items():
            if version > stored.get(trade_id, -1):
                stored[trade_id] = version
                writes += 1
    return writes


@pytest.mark.parametrize("seed", [1, 2])
def test_chained_stages_produce_exact_totals(pipeline: Pipeline, seed: int) -> None:
    payloads, final_states, identities = random_workload(seed)
    batches = [range(start, min(start + 17, len(payloads))) for start in range(0, len(payloads), 17)]
    for batch in batches:
        pipeline.run_all_stages([payloads[i] for i in batch])

    expected = expected_totals(final_states)
    actual = pipeline.aggregates()
    emptied = {key: actual[key] for key in set(actual) - set(expected)}
    assert {key: actual[key] for key in expected} == expected
    assert all(value == (Decimal(0), 0) for value in emptied.values()), "nodes all trades left hold zero"
    assert set(expected) <= set(actual)
    assert pipeline.stats()["MessagesApplied"] == expected_writes([[identities[i] for i in b] for b in batches])
