"""Issue 25 on a `make up` stack: KPL aggregates in, and the producer's own aggregated, multi-process send.

First `python -m producer send --processes 2 --aggregate`, then `verify`: EXACT. Then records
packed by awslabs' `aws-kinesis-agg` (one aggregate sent twice, a second overlapping it, plain
copies of some of their messages, two bad user records and one aggregate with a corrupt digest)
go to the same stream: the totals become the ledger's plus the aggregates' messages, each
counted once, the bad user records are quarantined one by one with their sub-sequence numbers
and the corrupt aggregate whole.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest

from local.deploy.deployer import aws_client
from local.paths import REPO_ROOT
from local.runner.inprocess import expected_totals, trade_message
from producer.ledger import Ledger
from producer.verifier import read_aggregate_table
from tests.lambdas.kpl_helpers import kpl_aggregate
from tests.local.deploy.conftest import StartStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

PATH = ("KplRisk", "KplDesk", "KplRegion")  # nodes of their own, beside the producer's


def producer(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "producer", *arguments, "--no-progress"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_aggregated_records_in_and_an_aggregated_multi_process_send_are_exact(
    local_stack: StartStack, tmp_path: Path
) -> None:
    deployment, paths = local_stack()
    where = ("--outputs", str(paths.outputs), "--ledger", str(tmp_path / "ledger.json"))
    sent = producer(
        "send", *where, "--processes", "2", "--aggregate", "--count", "2000", "--malformed-pct", "0", "--watch", "0"
    )
    assert sent.returncode == 0, sent.stderr
    verified = producer("verify", *where, "--timeout", "300", "--settle", "10")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "EXACT" in verified.stdout

    outputs = json.loads(paths.outputs.read_text())
    kinesis = aws_client("kinesis", deployment.endpoint_url)
    dynamodb = aws_client("dynamodb", deployment.endpoint_url)
    messages = [trade_message(f"kpl-{n}", n % 3, f"{n}.5", PATH) for n in range(30)]
    first = kpl_aggregate([*messages[:20], b'{"TradeID": "broken"', b"\xff\xfe"], partition_key="kpl-0")
    second = kpl_aggregate(messages[10:25], partition_key="kpl-10")
    corrupt = bytearray(kpl_aggregate(messages[25:], partition_key="kpl-25"))
    corrupt[-1] ^= 0x01
    for data, key in [(first, "a"), (first, "a"), (second, "b"), (bytes(corrupt), "c")] + [
        (m, f"kpl-{n}") for n, m in enumerate(messages[20:], start=20)
    ]:
        kinesis.put_record(StreamName=outputs["stream_name"], Data=data, PartitionKey=key)

    expected = Ledger.load(tmp_path / "ledger.json").aggregates()
    totals = {key: (node.value, node.trade_count) for key, node in expected.items()}
    totals |= expected_totals({f"kpl-{n}": (Decimal(f"{n}.5"), PATH) for n in range(30)})

    def nodes() -> dict[str, tuple[Decimal, int]]:
        snapshot = read_aggregate_table(dynamodb, outputs["aggregate_table"])
        return {key: (node.value, node.trade_count) for key, node in snapshot.nodes.items() if node.trade_count}

    deadline = time.monotonic() + 180
    while nodes() != totals and time.monotonic() < deadline:
        time.sleep(1)
    assert nodes() == totals, "every message once: duplicated and overlapping aggregates, plain copies"

    quarantined = {item["RecordId"]["S"]: item for item in dynamodb.scan(TableName=outputs["quarantine"])["Items"]}
    positions = sorted(
        (item["SequenceNumber"]["S"], int(item["SubSequenceNumber"]["N"]))
        for item in quarantined.values()
        if "SubSequenceNumber" in item
    )
    assert sorted(position for _, position in positions) == [20, 20, 21, 21]
    assert len({sequence for sequence, _ in positions}) == 2, "both copies of the aggregate, each bad user record kept"
    assert len(quarantined) == 5, "2 bad user records in each of the 2 copies, and the corrupt aggregate"
    (whole,) = [item for item in quarantined.values() if "SubSequenceNumber" not in item]
    assert "MD5 digest does not match" in whole["Reason"]["S"]
