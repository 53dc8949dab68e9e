"""The per-request benchmark sends the shapes it names, and they do what the pipeline's do."""

from __future__ import annotations

from benchmarks.emulator_requests import (
    MARKER_PREFIX,
    NODES,
    NODES_PER_TRANSACTION,
    REQUESTS,
    drain_scan,
    markdown,
    marker_scan,
    prepared_emulator,
    run_emulator_requests,
)


def test_the_scans_find_the_markers_and_the_nodes_the_transactions_wrote() -> None:
    emulator = prepared_emulator(transactions=3)
    markers = [item["AggregateKey"]["S"] for item in marker_scan(emulator)["Items"]]
    assert len(markers) == 6 and all(marker.startswith(MARKER_PREFIX) for marker in markers)
    nodes = {item["AggregateKey"]["S"]: item for item in drain_scan(emulator)["Items"]}
    assert set(nodes) == {*NODES, "#stats"}
    assert nodes["#stats"]["MessagesApplied"] == {"N": "300"}
    assert nodes[NODES[0]]["TradeCount"] == {"N": "9"}  # 3 ADDs of 3
    assert nodes[NODES[NODES_PER_TRANSACTION]]["TradeCount"] == {"N": "1"}  # put, never in a transaction


def test_every_request_is_measured_and_rendered() -> None:
    costs = run_emulator_requests(scale=0.05)
    assert [cost.request for cost in costs] == [name for name, _, _ in REQUESTS]
    assert all(cost.cpu_ms > 0 for cost in costs)
    assert markdown(costs).count("\n") == len(REQUESTS) + 1
