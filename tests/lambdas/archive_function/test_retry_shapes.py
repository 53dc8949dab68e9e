"""Every delta item archived and counted exactly once, whatever shape the retries take (emulator's S3).

Each test delivers a shard's items the way Lambda or a re-forming runner might, and compares the
bucket, read as `audit` reads it, with the truth of what was delivered (`ground_truth`): every
item in at least one object, counted once, `audit reconcile` exact against a table and a ledger
holding that truth. The shapes: a redelivery, a reordered batch, a batch grown, shrunk, shifted or
split, after an attempt that died before its object PUT, after it (its response lost: a crash
after the write), or after its receipt; lost responses on the wire (the SDK resends, S3 answers
412); concurrent invocations of the same and of overlapping batches.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from typing import Any

import boto3
import pytest

from aggregation.archive import ArchivedDelta, batch_object_id, batch_of, encode_batch_document
from archive_function import handler as archive_handler
from archive_function.store import ArchiveStore, WriteStats
from audit.archive_reader import read_archive
from audit.reconcile import RECEIPTS
from local.emulator.injected_faults import LOST_RESPONSE
from tests.lambdas.archive_function.archive_helpers import (
    DieAtPut,
    InvocationDied,
    WireRecorder,
    batch_hash,
    delta_keys,
    receipt_keys,
)
from tests.lambdas.archive_function.ground_truth import ShardStream, assert_archived_exactly, reconcile_with_truth
from tests.local.emulator.fault_control import FaultControl

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")


def attempt(stream: ShardStream, seeds: Sequence[str], wire: WireRecorder, die: DieAtPut | None = None) -> bool:
    """One invocation that may die (`die`), as Lambda's may: True when it succeeded."""
    wire.responder = die
    try:
        stream.invoke(seeds)
    except InvocationDied:
        return False
    finally:
        wire.responder = None
    return True


def lost_puts(bucket: str, where: str = "", percent: float = 100, **options: Any) -> dict[str, Any]:
    """Lost responses of PutObject under `bucket`/`where` (the SDK then resends the PUT)."""
    return {"kind": LOST_RESPONSE, "service": "s3", "percent": percent, "table": f"{bucket}/{where}", **options}


@pytest.mark.parametrize(("where", "variant"), [("deltas/", "error"), ("metastore/", "close")])
def test_a_put_whose_response_was_lost_is_resent_and_refused_and_that_is_success(
    wire: WireRecorder, s3_faults: FaultControl, where: str, variant: str
) -> None:
    stream = ShardStream(["a", "b", "c"])
    s3_faults.configure(lost_puts(wire.bucket, where, variant=variant))

    summary = stream.invoke(["a", "b", "c"])

    assert s3_faults.injected(LOST_RESPONSE, "s3", "PutObject") == 1
    resent = wire.object_puts() if where == "deltas/" else wire.receipt_puts()
    assert len(resent) == 2, "sent twice, by the SDK; the second got 412"
    assert summary["object_created"] + summary["receipt_created"] == 1  # the resend found its own write
    assert len(delta_keys(wire.bucket)) == 1 and len(receipt_keys(wire.bucket)) == 1
    assert_archived_exactly(stream, wire.bucket)


FAILED_ATTEMPT = ["a", "b", "c"]
DEATHS = {
    "before its object": DieAtPut(1),
    "after its object, before the response": DieAtPut(1, after_sending=True),
    "before its receipt": DieAtPut(2),
    "after its receipt, before the response": DieAtPut(2, after_sending=True),
}
RETRIES = {
    "the same batch": [["a", "b", "c"]],
    "reordered": [["c", "a", "b"]],
    "grown": [["a", "b", "c", "d"]],
    "shrunk": [["a"], ["b", "c"]],
    "shifted": [["z", "a", "b"], ["c", "d"]],
    "split and reordered": [["c"], ["d"], ["b", "a"]],
}


@pytest.mark.parametrize("death", DEATHS)
@pytest.mark.parametrize("retries", RETRIES)
def test_a_retry_of_any_shape_after_a_death_anywhere_archives_each_item_once(
    wire: WireRecorder, death: str, retries: str
) -> None:
    """`z` was archived before; the first attempt of a, b, c dies; the retries deliver them (and d)."""
    stream = ShardStream(["z", "a", "b", "c", "d"])
    stream.invoke(["z"])
    assert not attempt(stream, FAILED_ATTEMPT, wire, DieAtPut(DEATHS[death].put_number, DEATHS[death].after_sending))

    for batch in RETRIES[retries]:
        assert attempt(stream, batch, wire)

    archive = assert_archived_exactly(stream, wire.bucket)
    failed = batch_object_id(batch_hash(seed) for seed in FAILED_ATTEMPT)
    same_items = retries in ("the same batch", "reordered")
    assert (failed in archive.batches) == (death != "before its object" or same_items)
    # Without its receipt the failed attempt's object is a leftover: its items are archived again
    # (and reconcile, above, found each one in an object with a receipt).
    assert (failed in archive.receipts) == (death.startswith("after its receipt") or same_items)


def test_concurrent_invocations_of_the_same_batch_make_one_object(wire: WireRecorder) -> None:
    """Eight invocations of one batch at once: S3 lets one create each key, the others get 412 (or 409, resent)."""
    stream = ShardStream([f"item-{index}" for index in range(20)])
    outcomes = run_concurrently([stream.seeds] * 8, stream)

    assert sum(outcome["object_created"] for outcome in outcomes) == 1
    assert sum(outcome["receipt_created"] for outcome in outcomes) == 1
    assert len(delta_keys(wire.bucket)) == 1 and len(receipt_keys(wire.bucket)) == 1
    assert_archived_exactly(stream, wire.bucket)


def test_concurrent_invocations_of_overlapping_batches_count_each_item_once(wire: WireRecorder) -> None:
    stream = ShardStream([f"item-{index}" for index in range(30)])
    batches = [stream.seeds[start : start + 10] for start in range(0, 21, 5)] * 2

    run_concurrently(batches, stream)

    archive = assert_archived_exactly(stream, wire.bucket)
    assert len(archive.batches) == 5 and archive.items.copies == 50  # five objects, items in two of them


def run_concurrently(batches: Sequence[Sequence[str]], stream: ShardStream) -> list[dict[str, Any]]:
    barrier = threading.Barrier(len(batches))
    outcomes: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def invoke(seeds: Sequence[str]) -> None:
        barrier.wait()
        try:
            outcomes.append(stream.invoke(seeds))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=invoke, args=(batch,)) for batch in batches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    return outcomes


def test_random_boundaries_deaths_and_lost_responses_archive_exactly(
    wire: WireRecorder, s3_faults: FaultControl
) -> None:
    """A shard's worth of items, delivered as Lambda or a re-forming runner might: after a failed
    attempt the retry starts at the same item with a new size, sometimes earlier (items archived
    already), sometimes reordered; attempts die before or after either PUT; a quarter of all
    PutObject responses are lost; a success is sometimes delivered again."""
    rng = random.Random(15)
    stream = ShardStream([f"item-{index}" for index in range(120)])
    s3_faults.configure(lost_puts(wire.bucket, percent=25), lost_puts(wire.bucket, percent=25, variant="close"), seed=5)
    position = failures = 0
    while position < len(stream.seeds):
        start = max(0, position - rng.choice([0, 0, 2, 5]))
        batch = stream.seeds[start : position + rng.randint(1, 8)]
        if rng.random() < 0.3:
            batch = rng.sample(batch, len(batch))
        die = DieAtPut(rng.randint(1, 2), after_sending=rng.random() < 0.5) if rng.random() < 0.6 else None
        if not attempt(stream, batch, wire, die):
            failures += 1
            continue
        if rng.random() < 0.2:
            assert attempt(stream, batch, wire)  # delivered again after success
        position = start + len(batch)

    lost = s3_faults.clear()["total_injected"]
    assert failures >= 10 and lost >= 10, (failures, lost)
    archive = assert_archived_exactly(stream, wire.bucket)
    assert archive.items.copies > len(archive.items.items), "no item was archived twice: the test proved little"


def test_the_check_fails_for_a_writer_that_skips_the_receipt_of_an_object_it_finds(
    wire: WireRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control: "the object is there, so the batch was archived" is the plausible bug. An
    attempt that died between its two writes then never gets its receipt, and reconcile says so."""
    original = archive_handler.archive_batch

    def receipt_only_for_new_objects(deltas: Sequence[ArchivedDelta], store: ArchiveStore) -> dict[str, Any]:
        batch = batch_of(deltas)
        if not store.put_once(batch.key, encode_batch_document(batch), WriteStats(), lock=True):
            return {"object_created": 0, "receipt_created": 0, "items": len(batch.items), "conflict_retries": 0}
        return original(deltas, store)

    monkeypatch.setattr(archive_handler, "archive_batch", receipt_only_for_new_objects)
    stream = ShardStream(["a", "b", "c"])
    assert not attempt(stream, ["a", "b", "c"], wire, DieAtPut(2))  # the object written, not its receipt
    assert attempt(stream, ["a", "b", "c"], wire)

    archive = read_archive(boto3.client("s3"), wire.bucket)
    report = reconcile_with_truth(archive, stream.delivered)
    assert report.failed() == {RECEIPTS}
    assert "3 item(s) only in objects without a receipt" in str(report.checks)
