"""`toolkit.hosts`: the Host headers a local server answers (the defence against DNS rebinding)."""

from __future__ import annotations

import pytest

from toolkit.hosts import HostAllowlist, split_host_header


@pytest.mark.parametrize(
    ("header", "parsed"),
    [
        ("127.0.0.1:4566", ("127.0.0.1", 4566)),
        ("LocalHost:4566", ("localhost", 4566)),
        ("[::1]:4566", ("[::1]", 4566)),
        ("[::1]", ("[::1]", 80)),
        ("localhost", ("localhost", 80)),
        ("::1", ("::1", 80)),  # not a valid Host (unbracketed), and never allowed
        ("localhost:http", None),
        ("", None),
        (":4566", None),
    ],
)
def test_host_headers_are_split_into_name_and_port(header: str, parsed: tuple[str, int] | None) -> None:
    assert split_host_header(header) == parsed


def test_a_loopback_server_answers_loopback_names_with_its_port_only() -> None:
    allowed = HostAllowlist.loopback(4566)
    assert all(allowed.allows(f"{name}:4566") for name in ("localhost", "127.0.0.1", "[::1]", "LOCALHOST"))
    refused = ["rebind.example:4566", "localhost:4567", "localhost", "127.0.0.2:4566", "::1:4566", "", None]
    refused += ["127.0.0.1.nip.io:4566", "localhost.:4566", "[::ffff:127.0.0.1]:4566", "localhost:4566 x"]
    assert [header for header in refused if allowed.allows(header)] == []


def test_a_remote_server_also_answers_ip_literals_and_its_names() -> None:
    allowed = HostAllowlist(8000, frozenset({"localhost", "dash.internal"}), ip_literals=True)
    assert all(allowed.allows(host) for host in ("10.0.0.5:8000", "[fe80::1]:8000", "dash.internal:8000"))
    assert not any(allowed.allows(host) for host in ("rebind.example:8000", "10.0.0.5:8001", "10.0.0.5.nip.io:8000"))
    assert not allowed.allows("[10.0.0.5]:8000") and not allowed.allows("fe80::1:8000")


def test_only_the_server_s_own_origin_is_its_own() -> None:
    allowed = HostAllowlist.loopback(4566)
    assert allowed.allows_origin("http://127.0.0.1:4566") and allowed.allows_origin("http://localhost:4566")
    for origin in ("http://attacker.example", "null", "https://127.0.0.1:4566", "http://localhost:3000"):
        assert not allowed.allows_origin(origin), origin
    assert not allowed.allows_origin("http://127.0.0.1:4566/path")
