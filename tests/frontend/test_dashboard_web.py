"""The web server: security headers on every response (errors too), read-only, loopback-only names unless
``allow_remote``, the API document."""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from frontend.snapshot import LedgerState, SnapshotBuilder, StatsRecord, TableReading
from frontend.web import (
    CONTENT_SECURITY_POLICY,
    SECURITY_HEADERS,
    DashboardServer,
    RemoteServingRefused,
    SnapshotPublisher,
)
from tests.frontend.dashboard_helpers import HOSTILE_NAME, totals

STATIC = Path(__file__).resolve().parents[2] / "frontend" / "static"


@pytest.fixture
def server() -> Iterator[DashboardServer]:
    """A dashboard over a fixed reading (no AWS needed to test the HTTP layer)."""
    reading = TableReading(
        {
            "Delta": totals("1234567.891234", 2),
            "Delta:FXSpot": totals("1234567.891234", 2),
            HOSTILE_NAME: totals("-0.5", 1),
        },
        StatsRecord(12345, 1_700_000_000.0, 0.25, 0.75),
    )
    ledger = LedgerState("ledger.json", {"Delta": totals("1234567.891234", 2), "Delta:FXSpot": totals("1", 2)})
    publisher = SnapshotPublisher(SnapshotBuilder("AggTable", lambda: reading, lambda: ledger), interval=60)
    dashboard = DashboardServer(("127.0.0.1", 0), publisher)
    publisher.start()
    thread = threading.Thread(target=dashboard.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield dashboard
    dashboard.shutdown()
    dashboard.server_close()
    publisher.stop()


def request(
    server: DashboardServer, path: str, method: str = "GET", host: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    address, port = server.server_address[:2]
    connection = http.client.HTTPConnection(str(address), port, timeout=5)
    headers = {"Host": host} if host else {}
    connection.request(method, path, headers=headers)
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, body


@pytest.mark.parametrize(
    ("path", "status", "content_type"),
    [
        ("/", 200, "text/html; charset=utf-8"),
        ("/app.js", 200, "text/javascript; charset=utf-8"),
        ("/style.css", 200, "text/css; charset=utf-8"),
        ("/favicon.svg", 200, "image/svg+xml"),
        ("/api/snapshot", 200, "application/json"),
        ("/api/snapshot?t=1", 200, "application/json"),
        ("/../pyproject.toml", 404, "text/plain; charset=utf-8"),
        ("/static/../cli.py", 404, "text/plain; charset=utf-8"),
    ],
)
def test_every_response_carries_the_strict_content_security_policy(
    server: DashboardServer, path: str, status: int, content_type: str
) -> None:
    got_status, headers, _ = request(server, path)
    assert (got_status, headers["content-type"]) == (status, content_type)
    assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    policy = dict(part.strip().split(" ", 1) for part in CONTENT_SECURITY_POLICY.split(";"))
    assert policy["default-src"] == "'self'"
    assert policy["script-src"] == "'self'"  # no 'unsafe-inline', no 'unsafe-eval', no other origin
    assert policy["object-src"] == "'none'"
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["x-frame-options"] == "DENY"
    assert headers["server"] == "aggregation-dashboard"


def assert_security_headers(headers: dict[str, str]) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert headers[name.lower()] == value, name


def test_the_dashboard_is_read_only_and_its_refusals_carry_the_security_headers(server: DashboardServer) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"):
        status, headers, body = request(server, "/api/snapshot", method=method)
        assert status == 501, method
        assert_security_headers(headers)
        assert headers["content-type"] == "text/plain; charset=utf-8"
        assert body == (b"" if method == "HEAD" else f"501 Unsupported method ('{method}')\n".encode())


def test_a_malformed_request_is_refused_with_the_security_headers(server: DashboardServer) -> None:
    address, port = server.server_address[:2]
    with socket.create_connection((str(address), port), timeout=5) as connection:
        connection.sendall(b"GET /api/snapshot extra HTTP/1.1\r\nHost: localhost\r\n\r\n")  # four words
        reply = connection.makefile("rb").read().decode()
    head = reply.split("\r\n\r\n", 1)[0].lower()
    assert head.startswith("http/1.0 400")
    assert f"content-security-policy: {CONTENT_SECURITY_POLICY}".lower() in head
    assert "x-content-type-options: nosniff" in head


def test_a_dashboard_beyond_loopback_needs_allow_remote_and_still_checks_the_host() -> None:
    publisher = SnapshotPublisher(SnapshotBuilder("AggTable", lambda: TableReading({}, None), None), interval=60)
    with pytest.raises(RemoteServingRefused, match="needs --allow-remote"):
        DashboardServer(("0.0.0.0", 0), publisher)
    remote = DashboardServer(("0.0.0.0", 0), publisher, allow_remote=True, allowed_names=["Dash.Internal"])
    publisher.start()
    thread = threading.Thread(target=remote.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        port = remote.server_address[1]
        served = [f"127.0.0.1:{port}", f"192.0.2.7:{port}", f"dash.internal:{port}", f"{socket.gethostname()}:{port}"]
        assert [request(remote, "/api/snapshot", host=host)[0] for host in served] == [200] * len(served)
        status, headers, _ = request(remote, "/api/snapshot", host=f"rebind.example:{port}")  # DNS rebinding
        assert status == 421
        assert_security_headers(headers)
    finally:
        remote.shutdown()
        remote.server_close()
        publisher.stop()


def test_only_loopback_names_may_address_a_loopback_dashboard(server: DashboardServer) -> None:
    port = server.server_address[1]
    assert request(server, "/api/snapshot", host=f"localhost:{port}")[0] == 200
    status, headers, _ = request(server, "/api/snapshot", host=f"attacker.example:{port}")  # DNS rebinding
    assert status == 421
    assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY


def test_api_document_carries_exact_preformatted_values(server: DashboardServer) -> None:
    _, headers, body = request(server, "/api/snapshot")
    assert headers["cache-control"] == "no-store"
    document = json.loads(body)
    assert document["table"] == "AggTable"
    assert document["totals"] == {"value": "1,234,567.391234", "trade_count": "3", "nodes": "3"}
    assert [(top["name"], top["value"]) for top in document["top_level"]] == [
        (HOSTILE_NAME, "-0.5"),
        ("Delta", "1,234,567.891234"),
    ]
    delta = document["tree"][1]
    assert delta["children"][0] == {
        "key": "Delta:FXSpot",
        "name": "FXSpot",
        "value": "1,234,567.891234",
        "trade_count": "2",
        "children": [],
    }
    assert document["stats"]["messages_applied"] == "12,345"
    backlog = document["backlog"]
    assert (backlog["applied"], backlog["ingested"], backlog["lag"], backlog["idle"]) == ("12,345", None, None, True)
    assert document["quarantine"] is None  # no QuarantineTable named: the page says so
    verification = document["verification"]
    assert verification["status"] == "differs"
    assert verification["label"] == "2 nodes differ · Σ|Δ| = 1,234,567.391234"  # |-0.5| + 1,234,566.891234
    hostile, fx_spot = verification["differences"]
    assert (hostile["key"], hostile["value_difference"], hostile["trade_count_difference"]) == (
        HOSTILE_NAME,
        "-0.5",
        "+1",
    )
    assert (fx_spot["value_difference"], fx_spot["trade_count_difference"]) == ("+1,234,566.891234", "0")
    assert fx_spot["expected"] == {"value": "1", "trade_count": "2"}


def test_page_has_no_inline_script_or_style_and_builds_dom_without_html_parsing() -> None:
    page = (STATIC / "index.html").read_text(encoding="utf-8")
    assert re.findall(r"<script(?![^>]*\bsrc=)", page) == []
    assert re.findall(r"\son[a-z]+=", page) == []
    assert " style=" not in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org', "")  # nothing from a CDN
    assert "https://" not in page
    script = (STATIC / "app.js").read_text(encoding="utf-8")
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in script, sink


def test_stopping_does_not_wait_for_a_read_that_hangs() -> None:
    """Ctrl-C stops the dashboard while a read waits on a table that does not answer (the SDK would
    wait a minute): the publisher waits a moment for the refresh, then leaves its daemon thread."""
    reads = 0
    release = threading.Event()

    def read() -> TableReading:
        nonlocal reads
        reads += 1
        if reads > 1:
            release.wait(30)  # the second refresh hangs
        return TableReading({}, None)

    publisher = SnapshotPublisher(SnapshotBuilder("AggTable", read, None), interval=0.01)
    publisher.start()
    while reads < 2:
        threading.Event().wait(0.01)
    stopping = threading.Thread(target=publisher.stop)
    stopping.start()
    stopping.join(timeout=10)
    try:
        assert not stopping.is_alive(), "stop() waited for the hanging read"
    finally:
        release.set()
