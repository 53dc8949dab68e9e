"""A Hypothesis property: any sequence of deliveries of a shard's delta records, with retries of any
shape and deaths anywhere, archives each item exactly once, and `audit reconcile` is exact.

The model is Lambda's stream contract and no more: a lane's first record not yet committed is in
every delivery until one containing it succeeds; a delivery may start earlier (records already
archived: a shifted retry), hold any number of the records that follow (grown, shrunk), come in
any order (a reordered retry), die before or after either of its two PUTs reached S3, or be
delivered again after it succeeded. Hypothesis chooses all of it. Each example then reads its own
bucket as `audit` does and checks it against the truth computed from the records alone
(`ground_truth`): every record's item archived, counted once, and reconcile exact against a table
and a ledger holding that truth, its registry checks included. Against the emulator's S3, so the
conditional writes are S3's own semantics as the emulator corrects them.

`make test` runs `ARCHIVE_PROPERTY_EXAMPLES` (default 25) examples; `make chaos` runs 200.
"""

from __future__ import annotations

import os
import uuid

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.lambdas.archive_function.archive_helpers import DieAtPut, InvocationDied, WireRecorder
from tests.lambdas.archive_function.ground_truth import ShardStream, assert_archived_exactly

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")

EXAMPLES = int(os.environ.get("ARCHIVE_PROPERTY_EXAMPLES", "25"))
MAX_DELIVERIES = 40
"""After this many deliveries no attempt dies any more, so every example ends (Lambda's retries do)."""
DEATHS = st.one_of(
    st.none(),
    st.builds(DieAtPut, st.integers(min_value=1, max_value=2), st.booleans()),
)


@settings(max_examples=EXAMPLES, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.integers(min_value=1, max_value=12), data=st.data())
def test_any_deliveries_with_retries_of_any_shape_archive_each_item_exactly_once(
    wire: WireRecorder, monkeypatch: pytest.MonkeyPatch, records: int, data: st.DataObject
) -> None:
    bucket = f"archive-property-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    monkeypatch.setenv("ARCHIVE_BUCKET", bucket)
    wire.bucket = bucket
    stream = ShardStream([f"record-{index}" for index in range(records)])
    committed = deliveries = 0
    while committed < records:
        start = data.draw(st.integers(min_value=0, max_value=committed), label="start")
        end = data.draw(st.integers(min_value=committed + 1, max_value=records), label="end")
        batch = data.draw(st.permutations(stream.seeds[start:end]), label="batch")
        deliveries += 1
        die = data.draw(DEATHS, label="death") if deliveries < MAX_DELIVERIES else None
        if not _delivered(stream, batch, wire, die):
            continue
        committed = end
        if data.draw(st.booleans(), label="delivered again"):
            _delivered(stream, batch, wire, data.draw(DEATHS, label="death of the repeat"))

    assert stream.delivered == set(stream.seeds)
    assert_archived_exactly(stream, bucket)


def _delivered(stream: ShardStream, batch: list[str], wire: WireRecorder, die: DieAtPut | None) -> bool:
    wire.responder = die
    try:
        stream.invoke(batch)
    except InvocationDied:
        return False
    finally:
        wire.responder = None
    return True
