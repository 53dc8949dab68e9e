"""The producer's ledger: the ground truth the dashboard's verification badge compares against.

The producer (``producer/ledger.py``) merges what it sent into a JSON file,
by default ``.local/ledger.json``, with an ``aggregates`` map of aggregate key
to ``{"Value": "<decimal string>", "TradeCount": <int or string>}``. The
file is rewritten while the producer runs, so the watcher re-reads it when it
changes and keeps the last good reading over a half-written file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path

from aggregation.names import BOOKKEEPING_PREFIX
from frontend.snapshot import LedgerState, NodeTotals

#: Where ``python -m producer send`` writes the ledger unless told otherwise.
DEFAULT_LEDGER_PATH = Path(".local/ledger.json")


class LedgerError(Exception):
    """The ledger file exists but cannot be used; the message says why, in one line."""


def load_ledger(path: Path) -> dict[str, NodeTotals]:
    """Every hierarchy node the ledger expects, by aggregate key.

    The one place that knows the ledger's layout, deliberately tolerant of how
    it evolves: the map may be under ``aggregates`` (any capitalisation) or be
    the whole document, or be a list of items carrying their key as
    ``AggregateKey``/``key``; values may be decimal strings or JSON numbers
    (parsed as exact decimals, never floats); counts may be integers or
    integer strings; field names may be ``Value``/``value`` and
    ``TradeCount``/``trade_count``/``tradeCount``/``count``. Bookkeeping keys
    (``#…``) and unrelated top-level fields are ignored.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise LedgerError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        document = json.loads(text, parse_float=Decimal)
    except (ValueError, RecursionError) as error:
        raise LedgerError(f"{path} is not valid JSON ({error})") from None

    def field(entry: Mapping[str, object], *names: str) -> object:
        for name in names:
            if name in entry:
                return entry[name]
        raise LedgerError(f"{path}: an entry has none of the fields {', '.join(names)}")

    def exact_decimal(raw: object, key: str) -> Decimal:
        if isinstance(raw, Decimal):
            return raw
        if isinstance(raw, int | str) and not isinstance(raw, bool):
            try:
                parsed = Decimal(str(raw).strip())
            except InvalidOperation:
                parsed = Decimal("NaN")
            if parsed.is_finite():
                return parsed
        raise LedgerError(f"{path}: Value of {key!r} is not a decimal number: {raw!r}")

    def whole_number(raw: object, key: str) -> int:
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        if isinstance(raw, str | Decimal):
            try:
                parsed = Decimal(str(raw).strip())
                if parsed.is_finite() and parsed == parsed.to_integral_value():
                    return int(parsed)
            except InvalidOperation:
                pass
        raise LedgerError(f"{path}: TradeCount of {key!r} is not a whole number: {raw!r}")

    aggregates: object = document
    if isinstance(document, dict):
        for name, content in document.items():
            if isinstance(name, str) and name.lower() == "aggregates":
                aggregates = content
                break
    entries: list[tuple[str, object]]
    if isinstance(aggregates, dict):
        entries = [(str(key), entry) for key, entry in aggregates.items()]
    elif isinstance(aggregates, list):
        entries = []
        for item in aggregates:
            if not isinstance(item, dict):
                raise LedgerError(f"{path}: aggregates list holds a non-object: {item!r}")
            entries.append((str(field(item, "AggregateKey", "aggregate_key", "key")), item))
    else:
        raise LedgerError(f"{path} has no aggregates map")

    nodes: dict[str, NodeTotals] = {}
    for key, entry in entries:
        if key.startswith(BOOKKEEPING_PREFIX):
            continue
        if not isinstance(entry, dict):
            if isinstance(document, dict) and aggregates is document:
                continue  # a top-level field of a document without an aggregates map
            raise LedgerError(f"{path}: entry {key!r} is not an object")
        nodes[key] = NodeTotals(
            value=exact_decimal(field(entry, "Value", "value"), key),
            trade_count=whole_number(field(entry, "TradeCount", "trade_count", "tradeCount", "count"), key),
        )
    return nodes


class LedgerWatcher:
    """Reads the ledger when its file changes, for the builder to call on every refresh.

    The producer may create the file after the dashboard starts, or rewrite it
    while we read it: a missing file means "no ledger yet", and a file that
    fails to parse keeps the last good reading (it is retried on the next
    refresh) unless there never was one.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._version: tuple[int, int] | None = None
        self._state = LedgerState(str(path), None)

    def __call__(self) -> LedgerState:
        """The ledger as of now."""
        try:
            status = os.stat(self._path)
        except OSError:
            self._version = None
            self._state = LedgerState(str(self._path), None)
            return self._state
        version = (status.st_mtime_ns, status.st_size)
        if version == self._version:
            return self._state
        try:
            nodes = load_ledger(self._path)
        except LedgerError as error:
            if self._state.nodes is None:
                self._state = LedgerState(str(self._path), None, str(error))
            return self._state
        self._version = version
        self._state = LedgerState(str(self._path), nodes)
        return self._state
