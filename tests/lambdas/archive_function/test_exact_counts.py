"""The registry counts every archived object exactly once, whatever the retries look like.

The truth each test compares with is computed from what was delivered, independently of the
archive's code: the distinct delta items in the events handed to the handler (each one object,
counted once, its RecordCount once). The two ways the registry used to miss objects:

* a PutObject whose response was lost: the SDK resends it, S3 answers 412 (the first attempt
  wrote the object) and the object was taken for someone else's, never counted;
* a re-formed retry (the batch grown, shrunk or shifted after a failed attempt): its claims
  belonged to the failed batch's identity, so nothing ever settled them.

Lost responses come from the emulator (`local.emulator.injected_faults`), on the wire, with the SDK's own
retries; an invocation dies at a chosen PutObject through `DieAtPut`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

from aggregation.archive import delta_object_key
from archive_function import handler as archive_handler
from local.emulator.injected_faults import LOST_RESPONSE
from local.runner.inprocess import LambdaContextStub
from tests.lambdas.archive_function.archive_helpers import (
    DieAtPut,
    InvocationDied,
    WireRecorder,
    batch_hash,
    delta_keys,
    delta_record,
    read_registry,
)
from tests.local.emulator.fault_control import FaultControl

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")


def record_count(seed: str) -> int:
    """Every item its own RecordCount (1..5), so a state-change total is not just a multiple of the objects."""
    return 1 + int(batch_hash(seed)[:4], 16) % 5


class Stream:
    """The DeltaTable stream as the archive sees it: items with fixed sequence numbers, delivered in batches."""

    def __init__(self, seeds: Sequence[str]) -> None:
        self.records = {
            seed: delta_record(seed, 1000 + index, record_count=record_count(seed)) for index, seed in enumerate(seeds)
        }
        self.delivered: set[str] = set()
        self.stale_claims_read = 0
        self.failure: Exception | None = None

    def event(self, seeds: Sequence[str]) -> dict[str, Any]:
        self.delivered.update(seeds)
        return {"Records": [self.records[seed] for seed in seeds]}

    def invoke(self, seeds: Sequence[str]) -> dict[str, int]:
        result: dict[str, int] = archive_handler.lambda_handler(self.event(seeds), LambdaContextStub())
        self.stale_claims_read += result["stale_claims_read"]
        return result

    def attempt(self, seeds: Sequence[str], wire: WireRecorder, die_at_put: int | None = None) -> bool:
        """One invocation that may fail, as Lambda's may: True when it succeeded.

        It dies at its `die_at_put`-th PutObject, if it sends that many, or fails when the SDK
        gives up on a request (its attempts or its retry quota spent); `failure` says which.
        """
        wire.responder = DieAtPut(die_at_put) if die_at_put is not None else None
        try:
            self.invoke(seeds)
        except Exception as error:
            self.failure = error
            return False
        finally:
            wire.responder = None
        return True

    def dies(self, seeds: Sequence[str], wire: WireRecorder, at_put: int) -> bool:
        """True when an attempt died at its `at_put`-th PutObject (and at nothing else)."""
        return not self.attempt(seeds, wire, at_put) and isinstance(self.failure, InvocationDied)


def assert_counted_exactly(stream: Stream, bucket: str, open_claims: set[str] | None = None) -> None:
    """Registry = truth: one object per distinct delivered item, its RecordCount once, no open claim
    (but `open_claims`)."""
    expected_keys = sorted(delta_object_key(batch_hash(seed)) for seed in stream.delivered)
    expected_changes = sum(record_count(seed) for seed in stream.delivered)
    registry = read_registry(bucket)
    assert delta_keys(bucket) == expected_keys
    assert (registry.objects_archived, registry.state_changes_archived) == (len(expected_keys), expected_changes)
    assert set(registry.claims) == (open_claims or set())


def lost_puts(bucket: str, where: str = "", percent: float = 100, **options: Any) -> dict[str, Any]:
    """Lost responses of PutObject under `bucket`/`where` (the SDK then resends the PUT)."""
    return {"kind": LOST_RESPONSE, "service": "s3", "percent": percent, "table": f"{bucket}/{where}", **options}


def test_objects_whose_put_response_was_lost_are_counted(wire: WireRecorder, s3_faults: FaultControl) -> None:
    """Every object PUT applied, its response lost, the SDK's resend refused with 412."""
    stream = Stream(["a", "b", "c"])
    s3_faults.configure(lost_puts(wire.bucket, "deltas/"))

    summary = stream.invoke(["a", "b", "c"])

    assert s3_faults.injected(LOST_RESPONSE, "s3", "PutObject") == 3
    assert [put.if_none_match for put in wire.delta_puts()] == ["*"] * 6, "each PUT sent twice, by the SDK"
    assert summary["objects_counted"] == 3
    assert_counted_exactly(stream, wire.bucket)


@pytest.mark.parametrize("variant", ["error", "close"])
def test_lost_responses_of_registry_writes_count_nothing_twice(
    wire: WireRecorder, s3_faults: FaultControl, variant: str
) -> None:
    """The claim and the settle applied, their responses lost: the SDK's resend gets 412, the redrive
    finds its own change already there. A replay afterwards counts nothing."""
    stream = Stream(["a", "b"])
    s3_faults.configure(lost_puts(wire.bucket, "metastore/", variant=variant))

    stream.invoke(["a", "b"])
    stream.invoke(["a", "b"])

    assert s3_faults.injected(LOST_RESPONSE, "s3", "PutObject") >= 3
    assert_counted_exactly(stream, wire.bucket)


FAILED_ATTEMPT = ["a", "b", "c"]


@pytest.mark.parametrize(
    "retries",
    [
        pytest.param([["a", "b", "c", "d"]], id="grown"),
        pytest.param([["a"], ["b", "c"]], id="shrunk"),
        pytest.param([["b", "c", "d"], ["a"]], id="shifted"),
        pytest.param([["c"], ["d"], ["a", "b"]], id="split"),
    ],
)
def test_a_re_formed_retry_counts_what_the_failed_attempt_wrote(wire: WireRecorder, retries: list[list[str]]) -> None:
    """The first attempt claims and writes a, b, c, then dies before settling; the retries deliver
    the same items within other boundaries (plus d)."""
    stream = Stream(["a", "b", "c", "d"])
    assert stream.dies(FAILED_ATTEMPT, wire, at_put=1 + len(FAILED_ATTEMPT) + 1)  # claim, 3 objects, settle
    assert len(delta_keys(wire.bucket)) == 3 and read_registry(wire.bucket).objects_archived == 0

    for batch in retries:
        stream.invoke(batch)

    assert_counted_exactly(stream, wire.bucket)


def test_a_replay_that_dies_before_settling_does_not_count_again(wire: WireRecorder) -> None:
    """a is archived and counted; a replay of it claims anew, finds the object, dies before
    settling; the replay's retry must not take the object for its own."""
    stream = Stream(["a"])
    stream.invoke(["a"])
    assert stream.dies(["a"], wire, at_put=3)  # claim, object (412), settle

    stream.invoke(["a"])

    assert_counted_exactly(stream, wire.bucket)


def test_claims_of_an_invocation_that_never_comes_back_are_closed_by_later_ones(
    wire: WireRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A duplicate delivery of a, with b, dies before settling and is never delivered again.

    Its claims are stale two invocations later: those invocations read the objects and close
    the claims, counting b (created under its claim) and not a (counted long ago). e dies
    before its object is written and is never delivered again: its claim stays open, the one
    trace of an item the archive is missing.
    """
    monkeypatch.setattr(archive_handler, "SWEEP_AFTER_GENERATIONS", 4)
    stream = Stream(["a", "b", "c", "d", "e"])
    stream.invoke(["a"])
    assert stream.dies(["a", "b"], wire, at_put=4)  # claim, a (412), b, settle
    assert stream.dies(["e"], wire, at_put=2)  # claim, e
    stream.delivered.discard("e")  # delivered, but never to an invocation that got as far as writing it

    stream.invoke(["c"])
    summary = stream.invoke(["d"])

    assert summary["stale_claims_read"] == 2  # a and b; e has no object to read
    registry = read_registry(wire.bucket)
    assert set(registry.claims) == {batch_hash("e")}
    assert_counted_exactly(stream, wire.bucket, open_claims={batch_hash("e")})


def test_random_boundaries_deaths_and_lost_responses_count_exactly(
    wire: WireRecorder, s3_faults: FaultControl, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard's worth of items, delivered as Lambda or a re-forming runner might: after a failed
    attempt the retry starts at the same item with a new size, sometimes earlier (a duplicate
    delivery of archived items, whose claims are left behind when it dies); attempts die at any
    PutObject; a quarter of all PutObject responses (objects and registry) are lost. The shard
    then goes on with a few more items, and the claims left behind are swept."""
    monkeypatch.setattr(archive_handler, "SWEEP_AFTER_GENERATIONS", 4)
    rng = random.Random(15)
    seeds = [f"item-{index}" for index in range(60)]
    tail = [f"tail-{index}" for index in range(5)]
    stream = Stream(seeds + tail)
    s3_faults.configure(lost_puts(wire.bucket, percent=25), lost_puts(wire.bucket, percent=25, variant="close"), seed=5)
    position = failures = 0
    while position < len(seeds):
        start = max(0, position - rng.choice([0, 0, 2, 5]))
        batch = seeds[start : position + rng.randint(1, 6)]
        die_at_put = rng.randint(1, len(batch) + 1) if rng.random() < 0.5 else None
        if not stream.attempt(batch, wire, die_at_put):
            failures += 1
            continue
        position = start + len(batch)
    for seed in tail:
        while not stream.attempt([seed], wire):
            failures += 1

    lost = s3_faults.clear()["total_injected"]
    assert failures >= 10 and lost >= 20 and stream.stale_claims_read > 0, (failures, lost, stream.stale_claims_read)
    assert_counted_exactly(stream, wire.bucket)
