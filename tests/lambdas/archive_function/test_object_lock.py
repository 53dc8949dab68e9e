"""`archiveObjectLockDays`: every batch object is locked in governance mode; its receipt is not.

Run against the emulator's S3 with a bucket created with Object Lock, as the stack creates it
when the setting is on.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from archive_function import handler as archive_handler
from function_support import aws
from local.runner.inprocess import LambdaContextStub
from tests.lambdas.archive_function.archive_helpers import delta_event, delta_keys, receipt_keys


def test_batch_objects_are_locked_for_the_configured_days_and_receipts_are_not(
    aws_environment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3 = boto3.client("s3")
    bucket = f"archive-lock-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
    monkeypatch.setenv("ARCHIVE_BUCKET", bucket)
    monkeypatch.setenv("ARCHIVE_OBJECT_LOCK_DAYS", "3")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "ExactlyOnceAggregationTest")
    aws.s3_client.cache_clear()
    try:
        before = datetime.now(UTC)
        archive_handler.lambda_handler(delta_event(["lock-a", "lock-b"]), LambdaContextStub())
        archive_handler.lambda_handler(delta_event(["lock-c"], first_sequence=200), LambdaContextStub())
        after = datetime.now(UTC)
    finally:
        aws.s3_client.cache_clear()
    keys = delta_keys(bucket)
    assert len(keys) == 2  # one batch object per invocation
    for key in keys:
        head = s3.head_object(Bucket=bucket, Key=key)
        assert head["ObjectLockMode"] == "GOVERNANCE"
        until = head["ObjectLockRetainUntilDate"]
        assert before + timedelta(days=3) - timedelta(seconds=1) <= until <= after + timedelta(days=3, seconds=1)
        with pytest.raises(s3.exceptions.ClientError, match="AccessDenied"):
            s3.delete_object(Bucket=bucket, Key=key, VersionId=head["VersionId"])
    receipts = receipt_keys(bucket)
    assert len(receipts) == 2
    assert all("ObjectLockMode" not in s3.head_object(Bucket=bucket, Key=key) for key in receipts)
