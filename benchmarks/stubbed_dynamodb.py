"""A DynamoDB that answers at the botocore level: no network, a chosen round-trip time.

Two hooks on a client's event system:

- `SimulatedRoundTrip` (`before-send`): the request is built, signed and serialised as for
  AWS, then, instead of going on the wire, the thread sleeps the round trip and gets an
  empty 200 response, which botocore parses as usual. This is how the state function's
  throughput is measured at 5 ms and 20 ms: its real code path, with a DynamoDB whose
  latency we choose. A `BatchExecuteStatement` gets one success per statement.
- `CannedResponses` (`before-call`): the call returns a canned parsed response right
  after botocore validated and serialised the parameters, so only the handler's own
  work (and the SDK's request building) is left to time. A `BatchExecuteStatement` is
  answered with one success per statement it carried.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from botocore.awsrequest import AWSResponse, HTTPHeaders

CANNED_PARSED_RESPONSES: dict[str, dict[str, Any]] = {
    "UpdateItem": {},
    "PutItem": {},
    "TransactWriteItems": {},
    "BatchWriteItem": {"UnprocessedItems": {}},
}


STATEMENTS_SENT = "canned_statements_sent"
"""Where `CannedResponses` keeps a `BatchExecuteStatement`'s statement count in the call's context."""


class _Body:
    def __init__(self, content: bytes) -> None:
        self._content = content

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._content


def _ok_response(url: str, body: bytes = b"{}") -> AWSResponse:
    headers = HTTPHeaders()
    headers["x-amzn-requestid"] = "simulated"
    headers["content-type"] = "application/x-amz-json-1.0"
    return AWSResponse(url, 200, headers, _Body(body))


class SimulatedRoundTrip:
    """Every DynamoDB request takes `round_trip_seconds` and succeeds."""

    def __init__(self, round_trip_seconds: float) -> None:
        self.round_trip_seconds = round_trip_seconds
        self.requests = 0

    def __call__(self, request: Any, **_: Any) -> AWSResponse:
        self.requests += 1  # approximate under threads; informational only
        time.sleep(self.round_trip_seconds)
        if request.headers.get("X-Amz-Target", b"").endswith(b"BatchExecuteStatement"):
            statements = len(json.loads(request.body)["Statements"])
            return _ok_response(request.url, json.dumps({"Responses": [{}] * statements}).encode())
        return _ok_response(request.url)

    def attach(self, client: Any) -> None:
        client.meta.events.register("before-send.dynamodb", self)

    def detach(self, client: Any) -> None:
        client.meta.events.unregister("before-send.dynamodb", self)


class CannedResponses:
    """Every DynamoDB write returns its canned success at once, before any HTTP is involved."""

    def __call__(self, model: Any, context: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        parsed = dict(CANNED_PARSED_RESPONSES.get(model.name, {}))
        if model.name == "BatchExecuteStatement":
            parsed["Responses"] = [{} for _ in range(context[STATEMENTS_SENT])]
        parsed["ResponseMetadata"] = {"HTTPStatusCode": 200, "RequestId": "canned", "HTTPHeaders": {}}
        return _ok_response("https://dynamodb.canned.invalid/"), parsed

    @staticmethod
    def count_statements(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        """Note in the call's context how many statements it carries (the body is serialised by `before-call`)."""
        context[STATEMENTS_SENT] = len(params["Statements"])

    def attach(self, client: Any) -> None:
        client.meta.events.register("before-parameter-build.dynamodb.BatchExecuteStatement", self.count_statements)
        client.meta.events.register("before-call.dynamodb", self)

    def detach(self, client: Any) -> None:
        client.meta.events.unregister("before-parameter-build.dynamodb.BatchExecuteStatement", self.count_statements)
        client.meta.events.unregister("before-call.dynamodb", self)
