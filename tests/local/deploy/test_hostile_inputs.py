"""Issue 21's promise on a `make up` stack: nothing a producer sends stalls a shard.

One partition key (so one Kinesis shard, in order) carries good records, then every hostile
record the issue reproduced, then good records again. Every record is either quarantined
with its reason or aggregated exactly; the good records after the hostile ones are applied
(nothing blocks the shard); no function fails and no shard is left behind; every reader
(verifier, dashboard, `audit reconcile`) shows the nodes, names starting with `#` included.
The expected totals are computed here from the test's own table of outcomes, independently
of the pipeline and of the producer.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from decimal import Decimal
from typing import Any

import pytest

from frontend.table_reader import AggregateTableReader
from frontend.target import resolve_target
from local.deploy.deployer import aws_client
from local.paths import REPO_ROOT
from producer.verifier import read_aggregate_table
from tests.local.deploy.conftest import StartStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

LEVELS = ("RiskType", "TradeDesk", "Region")
PLAIN = ("Delta", "FXSpot", "AMER")
ZEROS_500 = "0" * 500
DIGITS_401 = "1" + "2" * 400


def message(trade_id: str, version: str, value: str, path: tuple[str, ...] = PLAIN, timestamp: str = "1.5") -> bytes:
    """A record with its numbers written verbatim, as a hostile producer can write them."""
    hierarchy = json.dumps(dict(zip(LEVELS, path, strict=True)))
    return (
        f'{{"TradeID": "{trade_id}", "Version": {version}, "Value": {value}, '
        f'"Timestamp": {timestamp}, "Hierarchy": {hierarchy}}}'
    ).encode()


GOOD_BEFORE = [(message(f"good-{n}", "1", f"{n}.25"), Decimal(f"{n}.25"), PLAIN) for n in range(5)]
GOOD_AFTER = [
    (message(f"late-{n}", "1", f"-{n}.5", ("Vega", "Rates", "EMEA")), Decimal(f"-{n}.5"), ("Vega", "Rates", "EMEA"))
    for n in range(5)
]
AGGREGATED_HOSTILE = [
    # (record, value it must count with, path): zeros of any exponent are zero; `#` names are nodes.
    (message("zero-huge-exponent", "1", "0E+500"), Decimal(0), PLAIN),
    (message("negative-zero", "1", "-0E+300"), Decimal(0), PLAIN),
    (message("zero-timestamp", "1", "3", timestamp="0E+500"), Decimal(3), PLAIN),
    (message("stats-named", "1", "7", ("#stats", "FXSpot", "AMER")), Decimal(7), ("#stats", "FXSpot", "AMER")),
    (message("hash-desk", "1", "11", ("Delta", "#1 desk", "AMER")), Decimal(11), ("Delta", "#1 desk", "AMER")),
    (message("absurd-timestamp", "1", "13", timestamp="1e999999999"), Decimal(13), PLAIN),
]
QUARANTINED_HOSTILE = [
    message("overflow", "1", "1e999999999"),
    message("underflow", "1", "1e-999999999"),
    message("zeros-500", "1", f"1{ZEROS_500}"),
    message("version-10-38", "1" + "0" * 38, "1"),
    message("value-401-digits", "1", DIGITS_401),
    message("version-401-digits", DIGITS_401, "1"),
]


def expected_totals() -> dict[str, tuple[Decimal, int]]:
    totals: dict[str, tuple[Decimal, int]] = {}
    for _, value, path in GOOD_BEFORE + AGGREGATED_HOSTILE + GOOD_AFTER:
        for depth in range(1, len(path) + 1):
            key = ":".join(path[:depth])
            old_value, old_count = totals.get(key, (Decimal(0), 0))
            totals[key] = (old_value + value, old_count + 1)
    return totals


def test_hostile_records_on_one_shard_are_quarantined_or_aggregated_and_never_stall_it(
    local_stack: StartStack,
) -> None:
    deployment, paths = local_stack()
    outputs = json.loads(paths.outputs.read_text())
    kinesis = aws_client("kinesis", deployment.endpoint_url)
    dynamodb = aws_client("dynamodb", deployment.endpoint_url)
    records = [r for r, _, _ in GOOD_BEFORE] + [r for r, _, _ in AGGREGATED_HOSTILE] + QUARANTINED_HOSTILE
    records += [r for r, _, _ in GOOD_AFTER]
    for data in records:  # one at a time, one partition key: one shard, in this order
        kinesis.put_record(StreamName=outputs["stream_name"], Data=data, PartitionKey="one-shard")

    expected = expected_totals()

    def nodes() -> dict[str, tuple[Decimal, int]]:
        snapshot = read_aggregate_table(dynamodb, outputs["aggregate_table"])
        return {key: (node.value, node.trade_count) for key, node in snapshot.nodes.items() if node.trade_count}

    deadline = time.monotonic() + 120
    while nodes() != expected and time.monotonic() < deadline:
        time.sleep(1)
    assert nodes() == expected, "the good records after the hostile ones were applied, exactly"

    quarantined = dynamodb.scan(TableName=outputs["quarantine"])["Items"]
    assert len(quarantined) == len(QUARANTINED_HOSTILE)
    assert all(item["Reason"]["S"] for item in quarantined)

    while time.monotonic() < deadline:  # every mapping, the archive's too, has caught up
        stats: Any = json.loads(paths.runner_stats.read_text())
        if all(shard["records_pending"] == 0 for shard in stats["shards"]) and not any(
            f["in_flight"] for f in stats["functions"].values()
        ):
            break
        time.sleep(0.5)
    assert all(f["errors"] == 0 and f["batches_skipped"] == 0 for f in stats["functions"].values()), stats
    assert all(shard["records_pending"] == 0 for shard in stats["shards"]), "no shard left behind"

    watched = resolve_target(table_name=None, stack_name=None, outputs_path=paths.outputs, region=None)
    dashboard = AggregateTableReader(watched.dynamodb(), watched.table_name)()  # as `python -m frontend` reads
    assert {"#stats", "Delta:#1 desk"} <= set(dashboard.nodes)
    reconciled = subprocess.run(
        [sys.executable, "-m", "audit", "reconcile", "--outputs", str(paths.outputs)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert reconciled.returncode == 0, reconciled.stdout + reconciled.stderr
