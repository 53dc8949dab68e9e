"""Reading the whole archive: every delta object (strictly parsed) and the registry."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from aggregation.archive import (
    ArchivedDelta,
    ArchiveDocumentError,
    Registry,
    batch_hash_of_key,
    parse_delta_document,
    parse_registry,
)
from aggregation.names import DELTA_PREFIX, REGISTRY_KEY

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

READ_CONCURRENCY = 16


@dataclass
class ArchiveContents:
    """What the bucket holds; `unreadable` lists (key, reason) for anything that is not a delta."""

    deltas: list[ArchivedDelta] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    registry: Registry | None = None

    @property
    def state_changes(self) -> int:
        return sum(delta.record_count for delta in self.deltas)


def _read_delta(s3: S3Client, bucket: str, key: str) -> ArchivedDelta | str:
    """The delta stored under `key`, or why it is not a valid one."""
    expected_hash = batch_hash_of_key(key)
    if expected_hash is None:
        return "key is not deltas/<hh>/<batch hash>.json"
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    try:
        delta = parse_delta_document(body)
    except ArchiveDocumentError as error:
        return str(error)
    if delta.batch_hash != expected_hash:
        return f"document's BatchHash {delta.batch_hash} differs from its key"
    return delta


def read_archive(s3: S3Client, bucket: str) -> ArchiveContents:
    """Every object under ``deltas/`` and the registry (None when it does not exist)."""
    keys = [
        item["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=DELTA_PREFIX)
        for item in page.get("Contents", [])
    ]
    contents = ArchiveContents()
    with ThreadPoolExecutor(max_workers=READ_CONCURRENCY) as pool:
        for key, outcome in zip(keys, pool.map(lambda key: _read_delta(s3, bucket, key), keys), strict=True):
            if isinstance(outcome, str):
                contents.unreadable.append((key, outcome))
            else:
                contents.deltas.append(outcome)
    try:
        contents.registry = parse_registry(s3.get_object(Bucket=bucket, Key=REGISTRY_KEY)["Body"].read())
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") not in ("NoSuchKey", "404"):
            raise
    except ArchiveDocumentError as error:
        contents.unreadable.append((REGISTRY_KEY, str(error)))
    return contents
