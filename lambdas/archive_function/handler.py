"""Archive function: keep every delta item for ever, in one object per invocation.

A second consumer of the DeltaTable stream (INSERT records only, like reduce). Per invocation,
two requests whatever the batch holds (`aggregation.archive` says why that counts every item
exactly once):

1. **the batch object**: the batch's distinct delta items in one canonical document under a key
   its items decide, ``deltas/<hh>/<object id>.batch.json``, created with ``If-None-Match: *``
   (and locked in governance mode for `archiveObjectLockDays`);
2. **its receipt**, the registry's record of it, ``metastore/receipts/<hh>/<object id>.json``,
   created with ``If-None-Match: *`` once the object exists.

A 412 on either is the same bytes already there: a redelivery, a reordered retry, a concurrent
invocation with the same items, or the SDK's resend of a request whose response was lost. Dying
between the two leaves an object without its receipt until the same items come again; a retry in
other boundaries writes its own object (copies of an item are counted once by every reader).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Final

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from aggregation.archive import ArchivedDelta, StreamPosition, batch_of, encode_batch_document, encode_receipt
from aggregation.delta_items import decode_delta_batch
from aggregation.names import ARCHIVE_SERVICE, NON_INSERT_RECORDS_SKIPPED
from archive_function.store import ArchiveStore, WriteStats
from function_support.aws import s3_client
from function_support.faults import FailurePoint, maybe_inject_failure
from function_support.settings import int_setting, required_setting
from function_support.stream_records import is_insert

STAGE: Final = "ARCHIVE"
SERVICE: Final = ARCHIVE_SERVICE

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


def archive_batch(deltas: Sequence[ArchivedDelta], store: ArchiveStore) -> dict[str, Any]:
    """Write the batch object, then its receipt (module docstring); counts for the log and metrics."""
    batch = batch_of(deltas)
    stats = WriteStats()
    object_created = store.put_once(batch.key, encode_batch_document(batch), stats, lock=True)
    receipt_created = store.put_once(batch.receipt.key, encode_receipt(batch.receipt), stats)
    return {
        "object_key": batch.key,
        "items": len(batch.items),
        "state_changes": batch.receipt.state_changes,
        "object_created": int(object_created),
        "receipt_created": int(receipt_created),
        "conflict_retries": stats.conflict_retries,
    }


@metrics.log_metrics
@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    maybe_inject_failure(STAGE, FailurePoint.BEFORE_WRITE)
    delivered = list(DynamoDBStreamEvent(event).records)
    records = [record for record in delivered if is_insert(record)]
    metrics.add_metric(name=NON_INSERT_RECORDS_SKIPPED, unit=MetricUnit.Count, value=len(delivered) - len(records))
    if not records:
        return {"records": 0}
    store = ArchiveStore(
        s3_client(), required_setting("ARCHIVE_BUCKET"), int_setting("ARCHIVE_OBJECT_LOCK_DAYS", 0, minimum=0)
    )
    started = time.monotonic()
    counts = archive_batch([archived_delta(record) for record in records], store)
    counts["records"] = len(records)
    metrics.add_metric(name="BatchObjectsCreated", unit=MetricUnit.Count, value=counts["object_created"])
    metrics.add_metric(name="BatchObjectsAlreadyArchived", unit=MetricUnit.Count, value=1 - counts["object_created"])
    metrics.add_metric(name="DeltaItemsArchived", unit=MetricUnit.Count, value=counts["items"])
    metrics.add_metric(name="ConditionalWriteConflictsRetried", unit=MetricUnit.Count, value=counts["conflict_retries"])
    logger.info("archive batch done", extra={**counts, "seconds": round(time.monotonic() - started, 3)})
    maybe_inject_failure(STAGE, FailurePoint.AFTER_WRITE)
    return counts
