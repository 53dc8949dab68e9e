"""Helpers for the archive tests: delta stream records, a bucket per test, and a wire recorder.

The wire recorder is a botocore `before-send.s3.PutObject` hook on the archive function's own
S3 client: it sees every PutObject exactly as it leaves for S3 (headers included), and can
answer in S3's place (to inject the 409 that moto never returns), or let the request reach S3
and lose its response (`DieAtPut`). It also notes any key the function reads (it reads none).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import boto3
from boto3.dynamodb.types import TypeSerializer
from botocore.awsrequest import AWSPreparedRequest, AWSResponse, HTTPHeaders
from botocore.httpsession import URLLib3Session

from aggregation.names import DELTA_PREFIX, RECEIPT_PREFIX
from archive_function import handler as archive_handler
from function_support import aws
from local.runner.inprocess import LambdaContextStub

DELTA_STREAM_ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/DeltaTable/stream/2024-01-01T00:00:00.000"

_serializer = TypeSerializer()


def batch_hash(seed: str) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()


def delta_record(
    seed: str,
    sequence_number: int,
    deltas: Mapping[str, tuple[str, int]] | None = None,
    record_count: int = 2,
) -> dict[str, Any]:
    """One DeltaTable INSERT stream record in Lambda's event format."""
    nodes = deltas if deltas is not None else {"Delta": ("10.5", 1), "Delta:FXSpot": ("10.5", 1)}
    image = {
        "BatchHash": batch_hash(seed),
        "Deltas": {key: {"Value": Decimal(value), "TradeCount": count} for key, (value, count) in nodes.items()},
        "RecordCount": record_count,
        "ProducerTimestamps": [Decimal("1616413258.8997078")],
        "CreatedAt": 1_700_000_000,
        "ExpiresAt": 1_700_604_800,
    }
    return {
        "eventID": hashlib.sha256(f"{seed}-event".encode()).hexdigest()[:32],
        "eventName": "INSERT",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": 1_700_000_000.0,
            "Keys": {"BatchHash": {"S": image["BatchHash"]}},
            "NewImage": {name: _serializer.serialize(value) for name, value in image.items()},
            "SequenceNumber": str(sequence_number),
            "SizeBytes": 200,
            "StreamViewType": "NEW_IMAGE",
        },
        "eventSourceARN": DELTA_STREAM_ARN,
    }


def delta_event(seeds: Sequence[str], first_sequence: int = 100) -> dict[str, Any]:
    return {"Records": [delta_record(seed, first_sequence + index) for index, seed in enumerate(seeds)]}


@dataclass
class SentPut:
    key: str
    if_none_match: str | None
    if_match: str | None


Responder = Callable[[AWSPreparedRequest, "WireRecorder"], AWSResponse | None]


@dataclass
class WireRecorder:
    """Every PutObject the archive's client sends; `responder` may answer instead of S3."""

    bucket: str
    puts: list[SentPut] = field(default_factory=list)
    reads: list[tuple[str, str]] = field(default_factory=list)  # (method, key)
    responder: Responder | None = None

    def _key(self, request: AWSPreparedRequest) -> str:
        return request.url.split("?", 1)[0].split(f"/{self.bucket}/", 1)[-1]

    def before_read(self, request: AWSPreparedRequest, **_: Any) -> None:
        self.reads.append((request.method or "", self._key(request)))

    def before_send(self, request: AWSPreparedRequest, **_: Any) -> AWSResponse | None:
        self.puts.append(SentPut(self._key(request), _header(request, "If-None-Match"), _header(request, "If-Match")))
        return self.responder(request, self) if self.responder is not None else None

    def object_puts(self) -> list[SentPut]:
        return [put for put in self.puts if put.key.startswith(DELTA_PREFIX)]

    def receipt_puts(self) -> list[SentPut]:
        return [put for put in self.puts if put.key.startswith(RECEIPT_PREFIX)]


def _header(request: AWSPreparedRequest, name: str) -> str | None:
    value = request.headers.get(name)
    return value.decode() if isinstance(value, bytes) else value


class _RawBody:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def s3_error_response(request: AWSPreparedRequest, status: int, code: str, message: str) -> AWSResponse:
    """An S3 error response as the service would send it."""
    body = f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message></Error>'
    headers = HTTPHeaders()
    headers["Content-Type"] = "application/xml"
    return AWSResponse(request.url, status, headers, _RawBody(body.encode()))


def conflict_response(request: AWSPreparedRequest) -> AWSResponse:
    return s3_error_response(
        request, 409, "ConditionalRequestConflict", "A conflicting operation occurred. Please retry."
    )


def send_unhooked(request: AWSPreparedRequest) -> AWSResponse:
    """Send the prepared request as it is (signed, its headers and body), past the recorder."""
    return URLLib3Session().send(request)


@contextmanager
def archive_bucket_environment(monkeypatch: Any) -> Iterator[WireRecorder]:
    """A fresh bucket, ARCHIVE_BUCKET set, and the recorder hooked on the function's client."""
    bucket = f"archive-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    monkeypatch.setenv("ARCHIVE_BUCKET", bucket)
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "ExactlyOnceAggregationTest")
    aws.s3_client.cache_clear()
    recorder = WireRecorder(bucket)
    # botocore-stubs types handlers as returning None; a before-send handler may return a response.
    aws.s3_client().meta.events.register("before-send.s3.PutObject", recorder.before_send)  # type: ignore[arg-type]
    for operation in ("GetObject", "HeadObject"):
        aws.s3_client().meta.events.register(f"before-send.s3.{operation}", recorder.before_read)
    try:
        yield recorder
    finally:
        aws.s3_client.cache_clear()
    assert_every_put_is_conditional(recorder)
    assert recorder.reads == [], "the archive function reads nothing"


def assert_every_put_is_conditional(recorder: WireRecorder) -> None:
    """The archive's invariant on the wire: every PutObject creates a batch object or a receipt, only if absent."""
    for put in recorder.puts:
        assert put.key.startswith((DELTA_PREFIX, RECEIPT_PREFIX)), put
        assert put.if_none_match == "*" and put.if_match is None, put


def keys_under(bucket: str, prefix: str) -> list[str]:
    pages = boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


def delta_keys(bucket: str) -> list[str]:
    return keys_under(bucket, DELTA_PREFIX)


def receipt_keys(bucket: str) -> list[str]:
    return keys_under(bucket, RECEIPT_PREFIX)


class InvocationDied(RuntimeError):
    """The archive invocation stopped here (a crash, a timeout, a killed execution environment)."""


@dataclass
class DieAtPut:
    """A responder: the invocation dies at its `put_number`-th PutObject (1 = the first).

    An invocation writes its batch object, then the receipt, so every point of it between two writes
    is reachable. `after_sending` True lets that PUT reach S3 first (a crash after the write, before
    its response came back); False, it dies before sending it.
    """

    put_number: int
    after_sending: bool = False
    sent: int = 0

    def __call__(self, request: AWSPreparedRequest, recorder: WireRecorder) -> AWSResponse | None:
        self.sent += 1
        if self.sent == self.put_number:
            if self.after_sending:
                send_unhooked(request)
            raise InvocationDied(f"died at PutObject {self.sent} ({recorder.puts[-1].key})")
        return None


def run(event: dict[str, Any]) -> dict[str, Any]:
    """The archive function's handler on `event`, as Lambda calls it."""
    result: dict[str, Any] = archive_handler.lambda_handler(event, LambdaContextStub())
    return result
