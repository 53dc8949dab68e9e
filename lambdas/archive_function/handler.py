"""Archive function: keep every delta item for ever, written exactly once, counted exactly once.

A second consumer of the DeltaTable stream (INSERT records only, like reduce). Per batch:

1. **claim** the batch's delta items in ``metastore/registry.json`` (compare-and-swap): each
   item keeps the claim already open for it, whoever opened it, or gets a new one;
2. **write** each item as an immutable JSON object with ``If-None-Match: *``, tagged with its
   claim id; on 412 (it exists) read the tag back (HeadObject);
3. **settle** (compare-and-swap): close the open claim of every object now seen to exist, and
   count the object when that claim is the one that created it. Claims left open for long by
   invocations that will not come back (`SWEEP_AFTER_GENERATIONS`) are closed the same way.

Nothing here depends on the batch's boundaries: a retry that is grown, shrunk or shifted
settles whatever earlier attempts claimed for its items. `aggregation.archive` explains why
this counts every object exactly once, and `store` how the conditional writes are retried.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
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
    ArchivedDelta,
    ArchiveDocumentError,
    ObservedObject,
    Registry,
    StreamPosition,
    claim_objects,
    settle_objects,
    stale_claims,
)
from aggregation.delta_items import decode_delta_batch
from aggregation.names import ARCHIVE_SERVICE, METRICS_NAMESPACE, NON_INSERT_RECORDS_SKIPPED
from archive_function.store import RegistryStore, RegistryUpdateStats, put_delta_object, read_delta_object
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

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE)


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
    claim_stats, settle_stats = RegistryUpdateStats(), RegistryUpdateStats()
    claimed = store.update(lambda registry: claim_objects(registry, hashes, _now()), claim_stats)

    held = claimed.claims  # the claim each item is written under
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

    counted = [0]

    def settle(registry: Registry) -> Registry | None:
        updated = settle_objects(registry, [*observed, *swept], _now())
        counted[0] = 0 if updated is None else updated.objects_archived - registry.objects_archived
        return updated

    store.update(settle, settle_stats)
    created = sum(seen.creator_claim == held[seen.delta.batch_hash] for seen in observed)
    return {
        "objects_created": created,  # under the claims this batch held (by this attempt or an earlier one)
        "objects_already_archived": len(observed) - created,
        "objects_counted": counted[0],
        "stale_claims_read": len(swept),
        "registry_writes": claim_stats.writes + settle_stats.writes,
        "registry_redrives": claim_stats.redrives + settle_stats.redrives,
        "registry_conflict_retries": claim_stats.conflict_retries + settle_stats.conflict_retries,
    }


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
        s3_client(), required_setting("ARCHIVE_BUCKET"), int_setting("ARCHIVE_OBJECT_LOCK_DAYS", 0, minimum=0)
    )
    started = time.monotonic()
    counts = archive_batch(
        deltas,
        store,
        positive_int_setting("ARCHIVE_WRITE_CONCURRENCY", DEFAULT_WRITE_CONCURRENCY),
        SWEEP_AFTER_GENERATIONS,
    )
    counts["records"] = len(records)
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
