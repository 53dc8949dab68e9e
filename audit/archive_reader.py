"""Reading the whole archive: every delta object (strictly parsed) and the registry shards, summed."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aggregation.archive import (
    ArchivedDelta,
    ArchiveDocumentError,
    RegistryTotals,
    batch_hash_of_key,
    parse_delta_document,
    parse_registry,
    registry_shard_of_key,
    registry_totals,
)
from aggregation.names import DELTA_PREFIX, REGISTRY_KEYS_PREFIX

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

READ_CONCURRENCY = 16


@dataclass
class ArchiveContents:
    """What the bucket holds; `unreadable` lists (key, reason) for anything that is not a delta."""

    deltas: list[ArchivedDelta] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    registry: RegistryTotals | None = None  # all registry shards together; None: no shard exists

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


def _keys(s3: S3Client, bucket: str, prefix: str) -> list[str]:
    return [
        item["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for item in page.get("Contents", [])
    ]


def read_archive(s3: S3Client, bucket: str) -> ArchiveContents:
    """Every object under ``deltas/`` and every registry shard, summed (None when there is none)."""
    keys = _keys(s3, bucket, DELTA_PREFIX)
    contents = ArchiveContents()
    with ThreadPoolExecutor(max_workers=READ_CONCURRENCY) as pool:
        for key, outcome in zip(keys, pool.map(lambda key: _read_delta(s3, bucket, key), keys), strict=True):
            if isinstance(outcome, str):
                contents.unreadable.append((key, outcome))
            else:
                contents.deltas.append(outcome)
    registries = []
    for key in _keys(s3, bucket, REGISTRY_KEYS_PREFIX):
        if registry_shard_of_key(key) is None:
            contents.unreadable.append((key, "not a registry shard key (metastore/registry/<k>.json)"))
            continue
        try:
            registries.append(parse_registry(s3.get_object(Bucket=bucket, Key=key)["Body"].read()))
        except ArchiveDocumentError as error:
            contents.unreadable.append((key, str(error)))
    if registries:
        contents.registry = registry_totals(registries)
    return contents
