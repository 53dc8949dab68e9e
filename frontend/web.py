"""The web view: a read-only stdlib HTTP server, one static page, and ``/api/snapshot``.

A background thread builds a snapshot every ``interval`` seconds, so every
open tab sees the same samples (and throughput history accrues even with no
tab open) while the table is read once per interval however many tabs poll.
The page (``static/app.js``) polls the API and updates the DOM in place.

Hierarchy names come from untrusted messages. The API document carries every
string that is not the server's own through `toolkit.untrusted.printable`, so a
control character or a bidirectional override in a name reaches the page as a
visible escape (``\u202e``) and cannot reorder what follows it; the page only
ever sets text with ``textContent``; the server adds a strict
Content-Security-Policy (no inline script, nothing from elsewhere) as a further
line of defence, on every response, errors included.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from frontend.formatting import format_count, format_decimal, format_rate, format_seconds
from frontend.snapshot import Snapshot, SnapshotBuilder, TreeNode
from toolkit.hosts import LOOPBACK_NAMES, HostAllowlist
from toolkit.ledger import NodeTotals
from toolkit.untrusted import printable

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

#: Headers on every response: the CSP, and no sniffing, framing or referrers.
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}

#: How many differing nodes the badge's detail lists (the rest are counted, not listed).
MAX_LISTED_DIFFERENCES = 20


@dataclass(frozen=True)
class StaticFile:
    """A file served from ``frontend/static/``."""

    body: bytes
    content_type: str


def load_static_files() -> dict[str, StaticFile]:
    """The page's files by URL path, read once (the server never touches the filesystem per request)."""
    folder = resources.files("frontend") / "static"
    files = {
        "/": ("index.html", "text/html; charset=utf-8"),
        "/app.js": ("app.js", "text/javascript; charset=utf-8"),
        "/style.css": ("style.css", "text/css; charset=utf-8"),
        "/favicon.svg": ("favicon.svg", "image/svg+xml"),
    }
    return {url: StaticFile((folder / name).read_bytes(), kind) for url, (name, kind) in files.items()}


# --------------------------------------------------------------------------- the API document


def _totals_document(totals: NodeTotals | None) -> dict[str, str | None]:
    return {
        "value": format_decimal(totals.value) if totals else None,
        "trade_count": format_count(totals.trade_count) if totals else None,
    }


def _tree_document(node: TreeNode) -> dict[str, Any]:
    return {
        "key": printable(node.key),
        "name": printable(node.name),
        **_totals_document(node.totals),
        "children": [_tree_document(child) for child in node.children],
    }


def _signed(formatted: str) -> str:
    """A difference always shows its sign (``+1``, ``-0.5``, ``0``)."""
    return formatted if formatted.startswith("-") or formatted == "0" else f"+{formatted}"


def _count_or_none(count: int | None) -> str | None:
    return format_count(count) if count is not None else None


def _backlog_document(snapshot: Snapshot) -> dict[str, Any] | None:
    backlog = snapshot.backlog
    if backlog is None:
        return None
    return {
        "ingested": _count_or_none(backlog.sent),
        "to_apply": _count_or_none(backlog.to_apply),
        "applied": format_count(backlog.applied),
        "lag": _count_or_none(backlog.behind),
        "superseded": _count_or_none(backlog.superseded),
        "idle": backlog.idle,
        "last_applied_at": backlog.last_applied_at,
    }


def _quarantine_document(snapshot: Snapshot) -> dict[str, Any] | None:
    quarantine = snapshot.quarantine
    if quarantine is None and snapshot.quarantine_error is None:
        return None
    return {
        "count": format_count(quarantine.count) if quarantine else None,
        "latest": [
            {"reason": record.reason, "at": record.quarantined_at}
            for record in (quarantine.latest if quarantine else ())
        ],
        "error": snapshot.quarantine_error,
    }


def snapshot_document(snapshot: Snapshot) -> dict[str, Any]:
    """The JSON the page renders. Every aggregate value is a preformatted exact string."""
    stats = snapshot.stats
    verification = snapshot.verification
    return {
        "table": printable(snapshot.table_name),
        "generated_at": snapshot.generated_at,
        "last_read_at": snapshot.last_read_at,
        "read_error": None if snapshot.read_error is None else printable(snapshot.read_error),
        "totals": {**_totals_document(snapshot.grand_total), "nodes": format_count(snapshot.node_count)},
        "top_level": [
            {"key": printable(node.key), "name": printable(node.name), **_totals_document(node.totals)}
            for node in snapshot.tree
        ],
        "stats": {
            "messages_applied": format_count(stats.messages_applied) if stats else None,
            "last_updated": stats.last_updated if stats else None,
            "applied_per_second": format_rate(snapshot.applied_per_second),
            "latency_window_seconds": snapshot.latency.window_seconds,
            "latency_mean": format_seconds(snapshot.latency.mean_seconds),
            "latency_max": format_seconds(snapshot.latency.max_seconds),
            "latency_observations": snapshot.latency.observations,
        },
        "backlog": _backlog_document(snapshot),
        "quarantine": _quarantine_document(snapshot),
        "verification": {
            "status": verification.status,
            "label": printable(verification.label),
            "ledger": None if verification.ledger_path is None else printable(verification.ledger_path),
            "differences": [
                {
                    "key": printable(difference.key),
                    "expected": _totals_document(difference.expected),
                    "actual": _totals_document(difference.actual),
                    "value_difference": _signed(format_decimal(difference.value_difference)),
                    "trade_count_difference": _signed(
                        format_count(difference.actual.trade_count - difference.expected.trade_count)
                    ),
                }
                for difference in verification.differences[:MAX_LISTED_DIFFERENCES]
            ],
            "differing_nodes": format_count(len(verification.differences)),
            "unlisted_differences": format_count(max(len(verification.differences) - MAX_LISTED_DIFFERENCES, 0)),
        },
        "tree": [_tree_document(node) for node in snapshot.tree],
        "chart": [
            {
                "t": point.observed_at,
                "rate": point.applied_per_second,
                "mean": point.latency_mean_seconds,
                "max": point.latency_max_seconds,
            }
            for point in snapshot.chart
        ],
    }


# --------------------------------------------------------------------------- the server


STOP_WAIT_SECONDS = 1.0
"""How long Ctrl-C waits for a refresh in progress."""


class SnapshotPublisher:
    """Builds a snapshot every ``interval`` seconds on its own thread and holds the latest as JSON."""

    def __init__(self, builder: SnapshotBuilder, interval: float) -> None:
        self._builder = builder
        self._interval = interval
        self._lock = threading.Lock()
        self._latest = b"{}"
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="snapshot-publisher", daemon=True)

    def start(self) -> None:
        """Publishes the first snapshot before returning, so the first page load has data."""
        self._publish()
        self._thread.start()

    def stop(self) -> None:
        """Stops the thread: after the current refresh, or at most `STOP_WAIT_SECONDS` from now.

        Ctrl-C must stop the dashboard at once, even while a read waits on a slow or unreachable
        table (the SDK's timeouts and retries take a minute); the thread is a daemon and holds
        nothing to flush, so it is left behind rather than waited for.
        """
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=STOP_WAIT_SECONDS)

    def latest(self) -> bytes:
        """The latest snapshot document, UTF-8 JSON."""
        with self._lock:
            return self._latest

    def _publish(self) -> None:
        body = json.dumps(snapshot_document(self._builder.build()), separators=(",", ":")).encode()
        with self._lock:
            self._latest = body

    def _run(self) -> None:
        while not self._stopping.wait(self._interval):
            try:
                self._publish()
            except Exception:  # a bug must not silently freeze the page: say so and keep going
                logging.getLogger(__name__).exception("cannot build a snapshot")


class RemoteServingRefused(ValueError):
    """The address is not loopback, and serving other machines was not asked for (``--allow-remote``)."""


def is_loopback_host(host: str) -> bool:
    """Whether ``--host`` names loopback: ``localhost`` or a loopback address (any other name resolves beyond it)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class DashboardServer(ThreadingHTTPServer):
    """The HTTP server; one thread per request, the data from the publisher.

    Bound to loopback, it answers only loopback names (`toolkit.hosts`): another site's page
    that rebinds its DNS name to 127.0.0.1 sends its own Host header and is turned away. Bound
    beyond loopback, it serves only with ``allow_remote`` (the page has no authentication), and
    still answers only the machine's own names, IP literals and ``allowed_names``.
    """

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        publisher: SnapshotPublisher,
        allow_remote: bool = False,
        allowed_names: Iterable[str] = (),
    ) -> None:
        super().__init__(address, DashboardRequestHandler)
        self.publisher = publisher
        self.static_files = load_static_files()
        bound_host, port = self.server_address[:2]
        host = bound_host.decode() if isinstance(bound_host, bytes) else str(bound_host)
        self.url = f"http://{host}:{port}/"
        self.remote = not ipaddress.ip_address(host).is_loopback
        if not self.remote:
            self.allowed_hosts = HostAllowlist.loopback(port, [host])
        elif allow_remote:
            names = {*LOOPBACK_NAMES, socket.gethostname(), socket.getfqdn(), *allowed_names}
            self.allowed_hosts = HostAllowlist(port, frozenset(name.lower() for name in names), ip_literals=True)
        else:
            self.server_close()
            raise RemoteServingRefused(
                f"{host} is not a loopback address: the dashboard has no authentication, so serving other "
                "machines needs --allow-remote"
            )


class DashboardRequestHandler(BaseHTTPRequestHandler):
    """GET only: the static page and ``/api/snapshot``. Anything else is refused (501), and
    every response, the errors `BaseHTTPRequestHandler` sends itself included, carries the
    security headers (`end_headers`)."""

    server: DashboardServer
    server_version = "aggregation-dashboard"
    error_content_type = "text/plain; charset=utf-8"
    error_message_format = "%(code)d %(message)s\n"

    def version_string(self) -> str:
        """The Server header: no Python version to fingerprint."""
        return self.server_version

    def do_GET(self) -> None:
        """Serves the page, its assets, or the latest snapshot."""
        if not self.server.allowed_hosts.allows(self.headers.get("Host")):
            self._send(HTTPStatus.MISDIRECTED_REQUEST, b"unexpected Host header\n", "text/plain; charset=utf-8")
            return
        path = self.path.split("?", 1)[0]
        if path == "/api/snapshot":
            self._send(HTTPStatus.OK, self.server.publisher.latest(), "application/json", cache="no-store")
            return
        static = self.server.static_files.get(path)
        if static is None:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")
            return
        self._send(HTTPStatus.OK, static.body, static.content_type, cache="no-cache")

    def end_headers(self) -> None:
        """Every response's headers end with the security headers: the 501 for POST, PUT,
        OPTIONS or HEAD and the 400 for a malformed request are sent by the base class, and
        carried neither the CSP nor ``nosniff`` before."""
        for name, value in SECURITY_HEADERS.items():
            self.send_header(name, value)
        super().end_headers()

    def _send(self, status: HTTPStatus, body: bytes, content_type: str, cache: str = "no-store") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", cache)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: a page polling every second would flood the terminal."""
