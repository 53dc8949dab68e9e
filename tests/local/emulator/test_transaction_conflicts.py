"""`CompatMiddleware` cancels a transaction that overlaps one in flight, as DynamoDB does, injected latency included."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.dynamodb.models import dynamodb_backends

from benchmarks.emulator_transactions import scratch_table
from local.emulator import injected_faults
from local.emulator.moto_compat import CompatMiddleware
from tests.local.runner.runner_harness import wait_for

ACCOUNT, REGION = "123456789012", "us-east-1"


def table_named(name: str) -> None:
    backend = dynamodb_backends[ACCOUNT][REGION]
    if name not in backend.tables:
        scratch_table(backend, name)


def transaction(*actions: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps({"TransactItems": list(actions)}).encode()
    return {
        "PATH_INFO": "/",
        "REQUEST_METHOD": "POST",
        "HTTP_X_AMZ_TARGET": "DynamoDB_20120810.TransactWriteItems",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "HTTP_AUTHORIZATION": f"AWS4-HMAC-SHA256 Credential=testing/20261125/{REGION}/dynamodb/aws4_request",
        "HTTP_HOST": "127.0.0.1:4566",
        "SERVER_PORT": "4566",
    }


def update(table: str, key: str) -> dict[str, Any]:
    return {"Update": {"TableName": table, "Key": {"pk": {"S": key}}, "UpdateExpression": "ADD n :one"}}


def put(table: str, key: str) -> dict[str, Any]:
    return {"Put": {"TableName": table, "Item": {"pk": {"S": key}, "other": {"S": "x"}}}}


class BlockingMoto:
    """Stands in for moto: holds the first transaction until released, answers the rest at once."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.served = 0

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        self.served += 1
        if self.served == 1:
            self.entered.set()
            self.release.wait(10)
        start_response("200 OK", [("Content-Type", "application/x-amz-json-1.0")])
        return [b"{}"]


def call(app: CompatMiddleware, environ: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    status: list[str] = []
    body = b"".join(app(environ, lambda s, _headers: status.append(s)))
    return status[0], json.loads(body)


def test_a_transaction_on_an_item_another_is_writing_is_cancelled_with_transaction_conflict() -> None:
    table_named("conflicts")
    moto = BlockingMoto()
    app = CompatMiddleware(moto)
    first_outcome: list[tuple[str, dict[str, Any]]] = []
    first = threading.Thread(
        target=lambda: first_outcome.append(call(app, transaction(update("conflicts", "root"), put("conflicts", "m1"))))
    )
    first.start()
    assert moto.entered.wait(10)

    status, reply = call(app, transaction(put("conflicts", "m2"), update("conflicts", "root")))
    assert status.startswith("400") and reply["__type"].endswith("TransactionCanceledException")
    assert [reason["Code"] for reason in reply["CancellationReasons"]] == ["None", "TransactionConflict"]
    elsewhere: list[tuple[str, dict[str, Any]]] = []
    other_items = threading.Thread(target=lambda: elsewhere.append(call(app, transaction(update("conflicts", "x")))))
    other_items.start()  # waits for its turn (requests are served one at a time), but is not cancelled

    moto.release.set()
    first.join(10)
    other_items.join(10)
    assert first_outcome[0][0].startswith("200") and elsewhere[0][0].startswith("200")
    assert call(app, transaction(put("conflicts", "m2"), update("conflicts", "root")))[0].startswith("200")
    assert moto.served == 3  # the cancelled transaction never reached moto
    assert app.transactions_in_flight.conflicts == 1


def test_injected_latency_holds_a_transactions_items_while_other_items_are_served() -> None:
    """`latency`: the delayed transaction's items stay claimed (a transaction on one of them is
    cancelled), and the wait is outside the service lock (one on other items is served meanwhile)."""
    table_named("latency")
    moto = BlockingMoto()
    moto.release.set()  # answers at once: the only wait is the injected one
    delayed_once = {"kind": "latency", "service": "dynamodb", "percent": 100, "hold_seconds": 3, "max_injections": 1}
    app = CompatMiddleware(moto, injected_faults.parse_config({"rules": [delayed_once]}))
    delayed_outcome: list[tuple[str, dict[str, Any]]] = []
    delayed = threading.Thread(target=lambda: delayed_outcome.append(call(app, transaction(update("latency", "root")))))
    delayed.start()
    wait_for(lambda: bool(app.transactions_in_flight.claimed), timeout_seconds=5, what="the delayed transaction")

    status, reply = call(app, transaction(update("latency", "root")))
    assert status.startswith("400")
    assert [reason["Code"] for reason in reply["CancellationReasons"]] == ["TransactionConflict"]
    assert call(app, transaction(update("latency", "elsewhere")))[0].startswith("200")
    assert delayed.is_alive() and moto.served == 1, "served while the delayed transaction still waits"
    delayed.join(10)
    assert delayed_outcome[0][0].startswith("200") and moto.served == 2
    assert app.faults.report()["injected"] == {"latency": {"dynamodb:TransactWriteItems": 1}}
