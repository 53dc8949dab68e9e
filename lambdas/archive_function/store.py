"""The archive's only S3 call: create an object once (``If-None-Match: *``), or find it there.

Every PutObject the archive sends carries ``If-None-Match: *`` (the bucket policy denies any
under ``deltas/`` or ``metastore/`` that carries neither it nor ``If-Match``), and every key it
writes names its content (`aggregation.archive`): so a 412 PreconditionFailed means the very
bytes this call would write are there already, written by an earlier attempt, by a concurrent
one, or by this call's own first try whose response was lost and which the SDK resent. Either
outcome is success.

A 409 ConditionalRequestConflict means a conditional write of the same key was in flight (S3
documents it for concurrent conditional writes): the same request is sent again after an
exponential backoff with full jitter, a bounded number of times, then the invocation fails and
its batch is retried.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import ClientError

from function_support.aws import error_code

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

JSON_CONTENT_TYPE: Final = "application/json"

MAX_CONFLICT_RETRIES: Final = 6
"""409 retries per object before the invocation fails (the batch is then retried)."""
BACKOFF_BASE_SECONDS: Final = 0.05
BACKOFF_CAP_SECONDS: Final = 2.0

PRECONDITION_FAILED: Final = "PreconditionFailed"
CONDITIONAL_REQUEST_CONFLICT: Final = "ConditionalRequestConflict"


class ConditionalWriteFailed(RuntimeError):
    """A write still conflicted (409) after the bounded retries; the invocation must fail."""


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


def object_lock_arguments(lock_days: int, now: datetime) -> dict[str, Any]:
    """The PutObject arguments that lock an object in governance mode for `lock_days` (none for 0)."""
    if not lock_days:
        return {}
    return {"ObjectLockMode": "GOVERNANCE", "ObjectLockRetainUntilDate": now + timedelta(days=lock_days)}


@dataclass
class WriteStats:
    """What an invocation's writes went through (logged, and turned into metrics)."""

    created: int = 0
    already_there: int = 0
    conflict_retries: int = 0
    backoffs: list[float] = field(default_factory=list)


@dataclass
class ArchiveStore:
    """Create-once writes into the archive bucket."""

    s3: S3Client
    bucket: str
    lock_days: int = 0
    """Governance-mode retention of each batch object, in days (0: none): `archiveObjectLockDays`."""
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    max_conflict_retries: int = MAX_CONFLICT_RETRIES

    def put_once(self, key: str, body: bytes, stats: WriteStats, *, lock: bool = False) -> bool:
        """Create `key` with `body` unless it exists; True when this call created it, False when it was there."""
        arguments = object_lock_arguments(self.lock_days, datetime.now(UTC)) if lock else {}
        conflicts = 0
        while True:
            try:
                self.s3.put_object(
                    Bucket=self.bucket,
                    Key=key,
                    Body=body,
                    ContentType=JSON_CONTENT_TYPE,
                    IfNoneMatch="*",
                    **arguments,
                )
            except ClientError as error:
                if is_precondition_failed(error):
                    stats.already_there += 1
                    return False
                if not is_conditional_conflict(error):
                    raise
                conflicts += 1
                stats.conflict_retries += 1
                if conflicts > self.max_conflict_retries:
                    raise ConditionalWriteFailed(
                        f"{key} still conflicting (409) after {self.max_conflict_retries} retries"
                    ) from error
                delay = backoff_seconds(conflicts, self.rng)
                stats.backoffs.append(delay)
                self.sleep(delay)
                continue
            stats.created += 1
            return True
