"""Archive function: keep every delta item for ever, written exactly once, counted exactly once.

A second consumer of the DeltaTable stream (INSERT records only, like reduce). Per batch:

1. **claim** the batch's delta items in ``metastore/registry.json`` (compare-and-swap), and
   note which of them an earlier attempt of this same batch had claimed already;
2. **write** each item as an immutable JSON object with ``If-None-Match: *`` (412: it exists);
3. **settle** the claims (compare-and-swap): an object counts when this attempt created it,
   or when it existed and an earlier attempt of this batch had claimed it (that attempt created
   it and failed before counting); other existing objects were counted long ago.

`aggregation.archive` explains why this counts every object exactly once across retries,
replays and concurrent invocations, and `store` how the conditional writes are retried.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from aggregation.archive import (
    ArchivedDelta,
    Registry,
    StreamPosition,
    claim_objects,
    settle_objects,
)
from aggregation.batches import batch_identity
from aggregation.deltas import NodeDelta
from archive_function.store import RegistryStore, RegistryUpdateStats, put_delta_object
from function_support.aws import s3_client
from function_support.faults import FailurePoint, maybe_inject_failure
from function_support.settings import METRICS_NAMESPACE, positive_int_setting, required_setting
from function_support.stream_records import NON_INSERT_RECORDS_SKIPPED, is_insert

STAGE: Final = "ARCHIVE"
SERVICE: Final = "archive"
DEFAULT_WRITE_CONCURRENCY: Final = 8

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE)


def archived_delta(record: DynamoDBRecord) -> ArchivedDelta:
    """One DeltaTable INSERT stream record as the document to archive."""
    stream_record = record.dynamodb
    if stream_record is None or record.event_id is None:
        raise ValueError(f"stream record {record.event_id} has no dynamodb payload")
    image = stream_record.new_image
    if not image:
        raise ValueError(f"stream record {record.event_id} has no new image (the mapping must deliver NEW_IMAGE)")
    return ArchivedDelta(
        batch_hash=str(image["BatchHash"]),
        deltas={
            str(key): NodeDelta(Decimal(node["Value"]), int(node["TradeCount"]))
            for key, node in image.get("Deltas", {}).items()
        },
        record_count=int(image.get("RecordCount", 0)),
        producer_timestamps=tuple(Decimal(ts) for ts in image.get("ProducerTimestamps", [])),
        created_at=int(image.get("CreatedAt", 0)),
        stream=StreamPosition(
            event_source_arn=str(record.event_source_arn or ""),
            event_id=record.event_id,
            sequence_number=str(stream_record.sequence_number or "0"),
        ),
    )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def archive_batch(
    deltas: list[ArchivedDelta], owner: str, store: RegistryStore, write_concurrency: int
) -> dict[str, int]:
    """Claim, write, settle (module docstring); returns counts for the log and metrics."""
    claim_stats, settle_stats = RegistryUpdateStats(), RegistryUpdateStats()
    # Claims this owner held before this attempt wrote anything. Only the first read counts:
    # a claim of ours seen after a redrive may be our own write whose response was lost.
    claimed_before_attempt: list[frozenset[str]] = []

    def claim(registry: Registry) -> Registry | None:
        outcome = claim_objects(registry, owner, deltas, _now())
        if not claimed_before_attempt:
            claimed_before_attempt.append(outcome.claimed_earlier)
        return outcome.registry

    store.update(claim, claim_stats)
    claimed_earlier = claimed_before_attempt[0]

    with ThreadPoolExecutor(max_workers=max(1, min(write_concurrency, len(deltas)))) as pool:
        created = list(pool.map(lambda delta: put_delta_object(store.s3, store.bucket, delta), deltas))
    to_count = frozenset(
        delta.batch_hash
        for delta, was_created in zip(deltas, created, strict=True)
        if was_created or delta.batch_hash in claimed_earlier
    )
    store.update(lambda registry: settle_objects(registry, owner, deltas, to_count, _now()), settle_stats)
    return {
        "objects_created": sum(created),
        "objects_already_archived": len(created) - sum(created),
        "objects_counted": len(to_count),
        "registry_writes": claim_stats.writes + settle_stats.writes,
        "registry_redrives": claim_stats.redrives + settle_stats.redrives,
        "registry_conflict_retries": claim_stats.conflict_retries + settle_stats.conflict_retries,
    }


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
    # The batch's identity, as the map function computes it: a retry of this batch (Lambda
    # retries stream batches unchanged) is the same owner and finds its own earlier claims.
    owner = batch_identity([delta.stream.event_id for delta in deltas])
    store = RegistryStore(s3_client(), required_setting("ARCHIVE_BUCKET"))
    started = time.monotonic()
    counts = archive_batch(
        deltas, owner, store, positive_int_setting("ARCHIVE_WRITE_CONCURRENCY", DEFAULT_WRITE_CONCURRENCY)
    )
    counts["records"] = len(records)
    metrics.add_metric(name="DeltaObjectsArchived", unit=MetricUnit.Count, value=counts["objects_created"])
    metrics.add_metric(
        name="DeltaObjectsAlreadyArchived", unit=MetricUnit.Count, value=counts["objects_already_archived"]
    )
    metrics.add_metric(name="RegistryRedrives", unit=MetricUnit.Count, value=counts["registry_redrives"])
    metrics.add_metric(name="RegistryConflictRetries", unit=MetricUnit.Count, value=counts["registry_conflict_retries"])
    logger.info("archive batch done", extra={**counts, "seconds": round(time.monotonic() - started, 3)})
    maybe_inject_failure(STAGE, FailurePoint.AFTER_WRITE)
    return counts
