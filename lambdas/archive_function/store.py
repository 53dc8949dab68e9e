"""The archive's S3 calls: write-once delta objects and the compare-and-swap registry shards.

Every PutObject carries a condition (the bucket policy denies any that does not):
* a delta object: ``If-None-Match: *`` and its claim id in the metadata; 412
  PreconditionFailed means it exists, and HeadObject then tells under which claim it was
  created (S3 reads are strongly consistent after the write that made the 412);
* a registry shard: ``If-Match: <ETag read>`` to update it, ``If-None-Match: *`` to create it.

A lost PutObject response is retried by the SDK; for a delta object the resend gets 412 and
the metadata read names this writer's own claim, so the object counts all the same
(`aggregation.archive` explains the counting). For the registry the resend gets 412 too and
the update is redriven: it finds its own change already there.

Registry updates (each of one shard) follow the two strategies S3 documents for conditional writes:
* **redrive** on 412 (the shard changed since it was read; or, for a create, someone
  created it first) and on 404 (it was deleted since it was read): read it again and re-apply
  the change to what is there now, so no other writer's change is ever overwritten;
* **retry** on 409 ConditionalRequestConflict (a concurrent conditional write to the same key
  was in progress): send the same request again after an exponential backoff with full
  jitter, a bounded number of times, then give up so that the stream batch is retried.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import ClientError

from aggregation.archive import (
    MAX_REGISTRY_SHARDS,
    ArchivedDelta,
    ArchiveDocumentError,
    ClaimRef,
    ObservedObject,
    Registry,
    claim_metadata,
    creator_claim,
    delta_object_key,
    encode_delta_document,
    encode_registry,
    parse_delta_document,
    registry_key,
)
from aggregation.archive import parse_registry as parse_registry_document
from function_support.aws import error_code

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

JSON_CONTENT_TYPE: Final = "application/json"

MAX_CONFLICT_RETRIES: Final = 6
"""409 retries per registry write before the invocation fails (the batch is then retried)."""
MAX_REDRIVES: Final = 64
"""412/404 redrives per registry update; each one means another writer made progress."""
BACKOFF_BASE_SECONDS: Final = 0.05
BACKOFF_CAP_SECONDS: Final = 2.0

PRECONDITION_FAILED: Final = "PreconditionFailed"
CONDITIONAL_REQUEST_CONFLICT: Final = "ConditionalRequestConflict"
NO_SUCH_KEY: Final = "NoSuchKey"


class RegistryUpdateFailed(RuntimeError):
    """The registry could not be updated within the bounds; the invocation must fail."""


def http_status(error: ClientError) -> int:
    return int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def is_precondition_failed(error: ClientError) -> bool:
    return error_code(error) == PRECONDITION_FAILED or http_status(error) == 412


def is_conditional_conflict(error: ClientError) -> bool:
    return error_code(error) == CONDITIONAL_REQUEST_CONFLICT or http_status(error) == 409


def backoff_seconds(retry: int, rng: random.Random | None = None) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2**retry)] (retry counts from 1)."""
    ceiling = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * (2**retry))
    return (rng or random).uniform(0, ceiling)


class DeltaObjectVanished(RuntimeError):
    """S3 refused to create an object that it then could not find: someone deleted it."""


def object_lock_arguments(lock_days: int, now: datetime) -> dict[str, Any]:
    """The PutObject arguments that lock a delta object in governance mode for `lock_days` (none for 0)."""
    if not lock_days:
        return {}
    return {"ObjectLockMode": "GOVERNANCE", "ObjectLockRetainUntilDate": now + timedelta(days=lock_days)}


def put_delta_object(
    s3: S3Client, bucket: str, delta: ArchivedDelta, claim: ClaimRef, lock_days: int = 0
) -> ObservedObject:
    """Write the delta's object once, under `claim` (locked for `lock_days` when the bucket has
    Object Lock: `archiveObjectLockDays`); the object as it exists afterwards."""
    try:
        s3.put_object(
            Bucket=bucket,
            Key=delta.key,
            Body=encode_delta_document(delta),
            ContentType=JSON_CONTENT_TYPE,
            IfNoneMatch="*",
            Metadata=claim_metadata(claim),
            **object_lock_arguments(lock_days, datetime.now(UTC)),
        )
    except ClientError as error:
        if not is_precondition_failed(error):
            raise
    else:
        return ObservedObject(delta, claim)
    try:  # it exists: created by our own first attempt (a lost response), or by another claim
        metadata = s3.head_object(Bucket=bucket, Key=delta.key)["Metadata"]
    except ClientError as error:
        if http_status(error) == 404:
            raise DeltaObjectVanished(f"{delta.key} existed (412) and then did not (404)") from error
        raise
    return ObservedObject(delta, creator_claim(metadata))


def read_delta_object(s3: S3Client, bucket: str, batch_hash: str) -> ObservedObject | None:
    """The object of `batch_hash` and its creator claim; None when it does not exist (yet).

    Raises `aggregation.archive.ArchiveDocumentError` when the object is not a delta document.
    """
    try:
        response = s3.get_object(Bucket=bucket, Key=delta_object_key(batch_hash))
    except ClientError as error:
        if error_code(error) in (NO_SUCH_KEY, "404"):
            return None
        raise
    delta = parse_delta_document(response["Body"].read())
    if delta.batch_hash != batch_hash:
        raise ArchiveDocumentError(f"{delta_object_key(batch_hash)} holds the document of {delta.batch_hash}")
    return ObservedObject(delta, creator_claim(response["Metadata"]))


def read_registry(s3: S3Client, bucket: str, shard: int) -> tuple[Registry, str | None]:
    """Registry shard `shard` and its ETag; an empty registry and None when it does not exist yet."""
    try:
        response = s3.get_object(Bucket=bucket, Key=registry_key(shard))
    except ClientError as error:
        if error_code(error) in (NO_SUCH_KEY, "404"):
            return Registry(), None
        raise
    return parse_registry_document(response["Body"].read()), response["ETag"]


@dataclass
class RegistryUpdateStats:
    """What one registry update went through (logged and turned into metrics)."""

    writes: int = 0
    redrives: int = 0
    conflict_retries: int = 0
    waited_seconds: float = 0.0
    backoffs: list[float] = field(default_factory=list)


@dataclass
class RegistryStore:
    """Compare-and-swap updates of the registry shards (``metastore/registry/<k>.json``)."""

    s3: S3Client
    bucket: str
    delta_lock_days: int = 0
    """Governance-mode retention of each delta object, in days (0: none); `put_delta_object`'s."""
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    max_conflict_retries: int = MAX_CONFLICT_RETRIES
    max_redrives: int = MAX_REDRIVES
    shards: int = 1
    """`archiveRegistryShards`: the shards invocations claim in (``0..shards-1``)."""

    def __post_init__(self) -> None:
        if not 1 <= self.shards <= MAX_REGISTRY_SHARDS:
            raise ValueError(f"registry shards must be 1..{MAX_REGISTRY_SHARDS}, got {self.shards}")

    def update(
        self, shard: int, change: Callable[[Registry], Registry | None], stats: RegistryUpdateStats | None = None
    ) -> Registry:
        """Apply `change` to registry shard `shard` until a conditional write of it succeeds.

        `change` is applied to a fresh read after every 412/404 and must be a pure function
        of the registry it is given; None means "nothing to write" (the registry is returned
        as read). Raises `RegistryUpdateFailed` past the bounds.
        """
        stats = stats if stats is not None else RegistryUpdateStats()
        while True:
            current, etag = read_registry(self.s3, self.bucket, shard)
            updated = change(current)
            if updated is None:
                return current
            if self._write(registry_key(shard), encode_registry(updated), etag, stats):
                stats.writes += 1
                return updated
            stats.redrives += 1
            if stats.redrives > self.max_redrives:
                raise RegistryUpdateFailed(
                    f"{registry_key(shard)} changed under {self.max_redrives} consecutive updates"
                )

    def _write(self, key: str, body: bytes, etag: str | None, stats: RegistryUpdateStats) -> bool:
        """One conditional write, retried on 409; False when the condition failed (redrive)."""
        conflicts = 0
        while True:
            try:
                if etag is None:  # creation: only if nobody created it meanwhile
                    self.s3.put_object(
                        Bucket=self.bucket, Key=key, Body=body, ContentType=JSON_CONTENT_TYPE, IfNoneMatch="*"
                    )
                else:  # update: only if it is still the version that was read
                    self.s3.put_object(
                        Bucket=self.bucket, Key=key, Body=body, ContentType=JSON_CONTENT_TYPE, IfMatch=etag
                    )
            except ClientError as error:
                if is_precondition_failed(error) or error_code(error) == NO_SUCH_KEY:
                    return False
                if not is_conditional_conflict(error):
                    raise
                conflicts += 1
                stats.conflict_retries += 1
                if conflicts > self.max_conflict_retries:
                    raise RegistryUpdateFailed(
                        f"{key} write still conflicting (409) after {self.max_conflict_retries} retries"
                    ) from error
                delay = backoff_seconds(conflicts, self.rng)
                stats.backoffs.append(delay)
                stats.waited_seconds += delay
                self.sleep(delay)
                continue
            return True
