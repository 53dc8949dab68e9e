"""Reading the whole archive: batch objects, receipts, and the earlier releases' per-item objects and
registry, each strictly parsed; every item counted once however many objects hold it.

Both layouts are read (`aggregation.archive`, `aggregation.archive_legacy`): a bucket upgraded in
place holds what each release wrote, an item possibly in both (the new code archives again what
the old one wrote before failing), and `distinct_items` counts it once.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, TypeVar

from aggregation.archive import (
    ArchivedBatch,
    ArchiveDocumentError,
    DistinctItems,
    Receipt,
    distinct_items,
    object_id_of_batch_key,
    object_id_of_receipt_key,
    parse_batch_document,
    parse_delta_document,
    parse_receipt,
)
from aggregation.archive_legacy import (
    ItemObject,
    LegacyAccount,
    Registry,
    account_for_legacy_objects,
    batch_hash_of_item_key,
    creator_claim,
    parse_registry,
    registry_shard_of_key,
)
from aggregation.names import DELTA_PREFIX, RECEIPT_PREFIX, REGISTRY_KEYS_PREFIX

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

READ_CONCURRENCY = 16
T = TypeVar("T")


@dataclass
class ArchiveContents:
    """What the bucket holds; `unreadable` lists (key, reason) for anything not written as this code writes it."""

    batches: dict[str, ArchivedBatch] = field(default_factory=dict)  # object id -> batch object
    receipts: dict[str, Receipt] = field(default_factory=dict)  # object id -> its receipt
    item_objects: list[ItemObject] = field(default_factory=list)  # the earlier releases' per-item objects
    registries: dict[int, Registry] = field(default_factory=dict)  # the earlier releases' registry, by shard
    unreadable: list[tuple[str, str]] = field(default_factory=list)

    @cached_property
    def items(self) -> DistinctItems:
        """Every delta item once, from every object of both layouts (read the contents first)."""
        copies = [item for batch in self.batches.values() for item in batch.items]
        copies += [item.delta for item in self.item_objects]
        return distinct_items(copies)

    @property
    def objects(self) -> int:
        return len(self.batches) + len(self.item_objects)

    @property
    def state_changes(self) -> int:
        """State changes of the distinct items: what the table's `MessagesApplied` must equal."""
        return self.items.state_changes

    @property
    def legacy(self) -> LegacyAccount:
        return account_for_legacy_objects(self.registries, self.item_objects)


def _keys(s3: S3Client, bucket: str, prefix: str) -> list[str]:
    return [
        item["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for item in page.get("Contents", [])
    ]


def _read_all(keys: list[str], read: Callable[[str], T | str]) -> list[tuple[str, T | str]]:
    with ThreadPoolExecutor(max_workers=READ_CONCURRENCY) as pool:
        return list(zip(keys, pool.map(read, keys), strict=True))


def read_archive(s3: S3Client, bucket: str) -> ArchiveContents:
    """Every object under ``deltas/``, every receipt and every registry shard of earlier releases."""
    contents = ArchiveContents()

    def read_delta_key(key: str) -> ArchivedBatch | ItemObject | str:
        object_id = object_id_of_batch_key(key)
        batch_hash = batch_hash_of_item_key(key)
        if object_id is None and batch_hash is None:
            return "key is neither deltas/<hh>/<object id>.batch.json nor deltas/<hh>/<batch hash>.json"
        response = s3.get_object(Bucket=bucket, Key=key)
        body = response["Body"].read()
        try:
            if object_id is not None:
                return parse_batch_document(body, object_id)
            delta = parse_delta_document(body)
        except ArchiveDocumentError as error:
            return str(error)
        if delta.batch_hash != batch_hash:
            return f"document's BatchHash {delta.batch_hash} differs from its key"
        return ItemObject(delta, creator_claim(response.get("Metadata", {})))

    for key, outcome in _read_all(_keys(s3, bucket, DELTA_PREFIX), read_delta_key):
        if isinstance(outcome, ArchivedBatch):
            contents.batches[outcome.object_id] = outcome
        elif isinstance(outcome, ItemObject):
            contents.item_objects.append(outcome)
        else:
            contents.unreadable.append((key, str(outcome)))

    def read_receipt(key: str) -> Receipt | str:
        object_id = object_id_of_receipt_key(key)
        if object_id is None:
            return "key is not metastore/receipts/<hh>/<object id>.json"
        try:
            return parse_receipt(s3.get_object(Bucket=bucket, Key=key)["Body"].read(), object_id)
        except ArchiveDocumentError as error:
            return str(error)

    for key, receipt in _read_all(_keys(s3, bucket, RECEIPT_PREFIX), read_receipt):
        if isinstance(receipt, str):
            contents.unreadable.append((key, receipt))
        else:
            contents.receipts[receipt.object_id] = receipt

    for key in _keys(s3, bucket, REGISTRY_KEYS_PREFIX):
        shard = registry_shard_of_key(key)
        if shard is None:
            contents.unreadable.append((key, "not metastore/registry/<k>.json nor metastore/registry.json"))
            continue
        try:
            contents.registries[shard] = parse_registry(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        except ArchiveDocumentError as error:
            contents.unreadable.append((key, str(error)))
    return contents
