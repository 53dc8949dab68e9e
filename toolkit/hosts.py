"""Which ``Host`` headers a local server answers: the defence against DNS rebinding.

The embedded emulator and the dashboard listen on loopback ports, and any web page open in
the user's browser can send requests there. The browser's same-origin policy keys on the
name in the URL, so a page on ``rebind.example`` whose DNS answer changes to 127.0.0.1 can
read our answers as its own; the one thing it cannot change is the ``Host`` header, which
carries its own name. A server bound to loopback answers only loopback names, with its own
port (`HostAllowlist.loopback`). A dashboard serving other machines (``--allow-remote``) also
answers IP literals, which no DNS answer can rebind, and the names it is told.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
"""The names a loopback server answers to (with its port)."""

DEFAULT_HTTP_PORT = 80


def split_host_header(header: str) -> tuple[str, int] | None:
    """``name:port`` (``[v6]:port``) as (lower-case name, port); the port is 80 when absent; None if malformed."""
    name, colon, port = header.strip().lower().rpartition(":")
    if not colon or name.startswith("[") != name.endswith("]") or (not name.startswith("[") and ":" in name):
        name, port = header.strip().lower(), ""  # no port: `localhost`, `[::1]`
    if not name or (port and not port.isdigit()):
        return None
    return name, int(port) if port else DEFAULT_HTTP_PORT


def is_ip_literal(name: str) -> bool:
    """Whether ``name`` is an IPv4 address or a bracketed IPv6 address (no DNS answer can rebind it)."""
    bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        return False
    return (address.version == 6) == (bare != name)


@dataclass(frozen=True)
class HostAllowlist:
    """The ``Host`` headers a server on ``port`` answers."""

    port: int
    names: frozenset[str]
    """Lower-case host names (IPv6 bracketed) accepted with ``port``."""
    ip_literals: bool = False
    """Also accept any IP literal with ``port``: for a server deliberately serving other machines."""

    @classmethod
    def loopback(cls, port: int, extra_names: Iterable[str] = ()) -> HostAllowlist:
        """Only the loopback names (and ``extra_names``, e.g. the loopback address bound), with ``port``."""
        return cls(port, frozenset((*LOOPBACK_NAMES, *(name.lower() for name in extra_names))))

    def allows(self, header: str | None) -> bool:
        """Whether a request with this ``Host`` header (None: none sent) is answered."""
        parsed = split_host_header(header) if header else None
        if parsed is None:
            return False
        name, port = parsed
        if port != self.port:
            return False
        return name in self.names or (self.ip_literals and is_ip_literal(name))

    def allows_origin(self, origin: str) -> bool:
        """Whether a browser's ``Origin`` header names this server itself (``http://<allowed host>``)."""
        scheme, separator, host = origin.strip().partition("://")
        return bool(separator) and scheme.lower() == "http" and "/" not in host and self.allows(host)
