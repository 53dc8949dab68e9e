"""Archive function: keep every delta item for ever, written exactly once, counted exactly once.

A second consumer of the DeltaTable stream (INSERT records only, like reduce). Per batch:

1. **claim** the batch's delta items in one registry shard, ``metastore/registry/<k>.json``
   with ``k`` a function of the batch's content (`registry_shard_for`), by compare-and-swap:
   each item keeps the claim already open for it there, whoever opened it, or gets a new one;
2. **write** each item as an immutable JSON object with ``If-None-Match: *``, tagged with its
   claim id; on 412 (it exists) read the tag back (HeadObject);
3. **settle** (compare-and-swap): close the open claim of every object now seen to exist, in
   this shard and in the shard of the claim that created it when that is another (a retry
   with other boundaries), and count the object where that claim closes. Claims left open for
   long by invocations that will not come back (`SWEEP_AFTER_GENERATIONS`) are closed the same
   way; so are those of shards nothing claims in any more (the legacy single registry, shards
   above a lowered `archiveRegistryShards`), every `RETIRED_SWEEP_SECONDS` per instance.

Nothing here depends on the batch's boundaries: a retry that is grown, shrunk or shifted
settles whatever earlier attempts claimed for its items. `aggregation.archive` explains why
this counts every object exactly once, and `store` how the conditional writes are retried.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, Final

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from aggregation.archive import (
    LEGACY_SHARD,
    ArchivedDelta,
    ArchiveDocumentError,
    ClaimRef,
    ObservedObject,
    Registry,
    StreamPosition,
    claim_objects,
    registry_shard_for,
    registry_shard_of_key,
    settle_objects,
    settle_routes,
    stale_claims,
)
from aggregation.delta_items import decode_delta_batch
from aggregation.names import ARCHIVE_SERVICE, NON_INSERT_RECORDS_SKIPPED, REGISTRY_KEYS_PREFIX
from archive_function.store import (
    RegistryStore,
    RegistryUpdateFailed,
    RegistryUpdateStats,
    put_delta_object,
    read_delta_object,
    read_registry,
)
from function_support.aws import s3_client
from function_support.faults import FailurePoint, maybe_inject_failure
from function_support.settings import int_setting, positive_int_setting, required_setting
from function_support.stream_records import is_insert

STAGE: Final = "ARCHIVE"
SERVICE: Final = ARCHIVE_SERVICE
DEFAULT_WRITE_CONCURRENCY: Final = 8
SWEEP_AFTER_GENERATIONS: Final = 1000
"""A claim open for this many registry writes is swept: by then it most likely belongs to an
invocation that will not come back. Sweeping a claim still in flight is harmless (it closes
exactly as its owner's settle would); the lag only spares in-flight objects a useless read."""
MAX_SWEPT_CLAIMS: Final = 8
"""Stale claims one invocation reads and closes at most (a GetObject each), chosen at random
so that a claim whose object never appears cannot hold the sweep up."""
RETIRED_SWEEP_SECONDS: Final = 300.0
"""How often one function instance sweeps retired shards (one LIST of the registry keys, then a
GET and at most `MAX_SWEPT_CLAIMS` object reads per retired shard with open claims): rarely, as
they only hold claims of deliveries that died around a deploy."""

_retired_swept_at: list[float] = []  # this instance's last retired-shard sweep (monotonic clock)

logger = Logger(service=SERVICE)
# The namespace is the stack's own, from POWERTOOLS_METRICS_NAMESPACE (`aggregation.names.stack_metrics_namespace`).
metrics = Metrics(service=SERVICE)


def archived_delta(record: DynamoDBRecord) -> ArchivedDelta:
    """One DeltaTable INSERT stream record as the document to archive (decoded exactly)."""
    stream_record = record.dynamodb
    if stream_record is None or record.event_id is None:
        raise ValueError(f"stream record {record.event_id} has no dynamodb payload")
    image = stream_record.raw_event.get("NewImage")
    if not image:
        raise ValueError(f"stream record {record.event_id} has no new image (the mapping must deliver NEW_IMAGE)")
    batch = decode_delta_batch(image)
    return ArchivedDelta(
        batch_hash=batch.batch_hash,
        deltas=batch.deltas,
        record_count=batch.record_count,
        producer_timestamps=batch.producer_timestamps,
        created_at=batch.created_at,
        stream=StreamPosition(
            event_source_arn=str(record.event_source_arn or ""),
            event_id=record.event_id,
            sequence_number=str(stream_record.sequence_number or "0"),
        ),
    )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def archive_batch(
    deltas: Sequence[ArchivedDelta],
    store: RegistryStore,
    write_concurrency: int,
    sweep_after_generations: int = SWEEP_AFTER_GENERATIONS,
) -> dict[str, int]:
    """Claim, write, settle (module docstring); returns counts for the log and metrics."""
    items = list({delta.batch_hash: delta for delta in deltas}.values())  # a replayed record: one object
    hashes = [delta.batch_hash for delta in items]
    shard = registry_shard_for(hashes, store.shards)
    claim_stats, settle_stats = RegistryUpdateStats(), RegistryUpdateStats()
    claimed = store.update(shard, lambda registry: claim_objects(registry, hashes, _now()), claim_stats)

    held = {batch_hash: ClaimRef(shard, claimed.claims[batch_hash]) for batch_hash in hashes}
    stale = _to_sweep(claimed, hashes, sweep_after_generations)
    with ThreadPoolExecutor(max_workers=max(1, min(write_concurrency, len(items)))) as pool:
        observed = list(
            pool.map(
                lambda item: put_delta_object(
                    store.s3, store.bucket, item, held[item.batch_hash], store.delta_lock_days
                ),
                items,
            )
        )
        swept = [seen for seen in pool.map(lambda batch_hash: _read_stale(store, batch_hash), stale) if seen]

    counted, shards_settled = settle_in_shards(store, shard, [*observed, *swept], settle_stats)
    created = sum(seen.creator_claim == held[seen.delta.batch_hash] for seen in observed)
    return {
        "objects_created": created,  # under the claims this batch held (by this attempt or an earlier one)
        "objects_already_archived": len(observed) - created,
        "objects_counted": counted,
        "stale_claims_read": len(swept),
        "registry_shard": shard,
        "registry_shards_settled": shards_settled,
        "registry_writes": claim_stats.writes + settle_stats.writes,
        "registry_redrives": claim_stats.redrives + settle_stats.redrives,
        "registry_conflict_retries": claim_stats.conflict_retries + settle_stats.conflict_retries,
    }


def settle_in_shards(
    store: RegistryStore, shard: int, observed: Sequence[ObservedObject], stats: RegistryUpdateStats
) -> tuple[int, int]:
    """Settle `observed` in `shard` and in their creator claims' shards (`settle_routes`).

    Returns the objects counted and the shards settled in. Each shard's update is its own
    compare-and-swap: dying between two leaves the other's claims open for the next observer.
    """
    counted = 0
    routes = settle_routes(shard, observed)
    for target, objects in routes.items():
        added = [0]
        store.update(target, _counting_settle(target, objects, added), stats)
        counted += added[0]
    return counted, len(routes)


def _counting_settle(
    shard: int, objects: Sequence[ObservedObject], added: list[int]
) -> Callable[[Registry], Registry | None]:
    """`settle_objects` in `shard` as a registry change; `added[0]`: the objects its last application counted."""

    def settle(registry: Registry) -> Registry | None:
        updated = settle_objects(registry, shard, objects, _now())
        added[0] = 0 if updated is None else updated.objects_archived - registry.objects_archived
        return updated

    return settle


def _to_sweep(registry: Registry, own: Sequence[str], after_generations: int) -> list[str]:
    stale = stale_claims(registry, own, after_generations)
    return random.sample(stale, min(MAX_SWEPT_CLAIMS, len(stale)))


def _read_stale(store: RegistryStore, batch_hash: str) -> ObservedObject | None:
    """A stale claim's object, if it can be read; sweeping is a courtesy, never a reason to fail."""
    try:
        return read_delta_object(store.s3, store.bucket, batch_hash)
    except (ClientError, ArchiveDocumentError) as error:
        logger.warning("stale claim left open", extra={"batch_hash": batch_hash, "error": str(error)})
        return None


def retired_shards(store: RegistryStore) -> list[int]:
    """Registry shards in the bucket that no invocation claims in: the legacy single registry and
    any at or above `store.shards` (left by a lowered `archiveRegistryShards`)."""
    paginator = store.s3.get_paginator("list_objects_v2")
    shards = (
        registry_shard_of_key(item["Key"])
        for page in paginator.paginate(Bucket=store.bucket, Prefix=REGISTRY_KEYS_PREFIX)
        for item in page.get("Contents", [])
    )
    return sorted(shard for shard in shards if shard is not None and (shard == LEGACY_SHARD or shard >= store.shards))


def sweep_retired_shards(store: RegistryStore) -> dict[str, int]:
    """Close open claims of retired shards, any age (nothing claims there any more, so their
    generations no longer tell age): read up to `MAX_SWEPT_CLAIMS` objects per shard and settle
    them (`settle_in_shards`: an object counts where its creator claim closes). A claim of an
    item still in flight (a previous release's invocation during the deploy) is harmless to
    sweep: its object does not exist yet, or it closes exactly as its owner's settle would."""
    stats = RegistryUpdateStats()
    read = counted = 0
    for shard in retired_shards(store):
        registry, _etag = read_registry(store.s3, store.bucket, shard)
        sample = random.sample(sorted(registry.claims), min(MAX_SWEPT_CLAIMS, len(registry.claims)))
        seen = [found for found in (_read_stale(store, batch_hash) for batch_hash in sample) if found]
        read += len(seen)
        if seen:
            counted += settle_in_shards(store, shard, seen, stats)[0]
    return {"retired_claims_read": read, "retired_objects_counted": counted}


def _retired_sweep_due(now: float) -> bool:
    """True once per `RETIRED_SWEEP_SECONDS` per instance (and on its first invocation)."""
    if _retired_swept_at and now - _retired_swept_at[0] < RETIRED_SWEEP_SECONDS:
        return False
    _retired_swept_at[:] = [now]
    return True


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    maybe_inject_failure(STAGE, FailurePoint.BEFORE_WRITE)
    delivered = list(DynamoDBStreamEvent(event).records)
    records = [record for record in delivered if is_insert(record)]
    metrics.add_metric(name=NON_INSERT_RECORDS_SKIPPED, unit=MetricUnit.Count, value=len(delivered) - len(records))
    if not records:
        return {"records": 0}
    deltas = [archived_delta(record) for record in records]
    store = RegistryStore(
        s3_client(),
        required_setting("ARCHIVE_BUCKET"),
        int_setting("ARCHIVE_OBJECT_LOCK_DAYS", 0, minimum=0),
        shards=positive_int_setting("ARCHIVE_REGISTRY_SHARDS", 1),
    )
    started = time.monotonic()
    counts = archive_batch(
        deltas,
        store,
        positive_int_setting("ARCHIVE_WRITE_CONCURRENCY", DEFAULT_WRITE_CONCURRENCY),
        SWEEP_AFTER_GENERATIONS,
    )
    counts["records"] = len(records)
    if _retired_sweep_due(time.monotonic()):
        try:
            counts.update(sweep_retired_shards(store))
        except (ClientError, ArchiveDocumentError, RegistryUpdateFailed) as error:  # a courtesy: never fails a batch
            logger.warning("retired registry shards not swept", extra={"error": str(error)})
    metrics.add_metric(name="DeltaObjectsArchived", unit=MetricUnit.Count, value=counts["objects_counted"])
    metrics.add_metric(
        name="DeltaObjectsAlreadyArchived", unit=MetricUnit.Count, value=counts["objects_already_archived"]
    )
    metrics.add_metric(name="StaleClaimsRead", unit=MetricUnit.Count, value=counts["stale_claims_read"])
    metrics.add_metric(name="RegistryRedrives", unit=MetricUnit.Count, value=counts["registry_redrives"])
    metrics.add_metric(name="RegistryConflictRetries", unit=MetricUnit.Count, value=counts["registry_conflict_retries"])
    logger.info("archive batch done", extra={**counts, "seconds": round(time.monotonic() - started, 3)})
    maybe_inject_failure(STAGE, FailurePoint.AFTER_WRITE)
    return counts
