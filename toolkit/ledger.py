"""The producer's ledger as the other tools read it, and comparing node totals exactly.

The producer (``producer/ledger.py``) owns the ledger: it writes it, and reads back the
trades and counts it merges runs with. The dashboard's badge, ``python -m audit
reconcile`` and the verifier only need the expected totals per node, and all compare them
with the same rule: Decimal equality of ``Value``, integer equality of ``TradeCount``, a
node absent on one side equal to a node at zero (the table keeps the item of a node
every trade has left, the ledger does not list it). Every key compared is a node path: the
readers of the aggregate table leave its bookkeeping items out, so a level value such as
``#1 desk`` is compared like any other.

Nothing here imports the pipeline's code: the ground truth must not share a bug with
what it checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Final, Protocol

from toolkit.files import UnreadableFile, read_json

DEFAULT_LEDGER_PATH: Final = Path(".local/ledger.json")
"""Where ``python -m producer send`` writes the ledger unless told otherwise."""


class Totals(Protocol):
    """What a hierarchy node holds, whoever computed it."""

    @property
    def value(self) -> Decimal: ...

    @property
    def trade_count(self) -> int: ...


@dataclass(frozen=True)
class NodeTotals:
    """One node's totals: the exact sum of its trades' values and how many there are."""

    value: Decimal
    trade_count: int


ZERO_TOTALS: Final = NodeTotals(Decimal(0), 0)


class LedgerError(Exception):
    """The ledger file exists but cannot be used; the message says why, in one line."""


def node_keys(*sides: Iterable[str]) -> list[str]:
    """Every hierarchy node named on any side, sorted."""
    return sorted({key for side in sides for key in side})


def same_totals(left: Totals | None, right: Totals | None) -> bool:
    """Exact equality; an absent node (None) equals one at zero value and zero trades."""
    left = left if left is not None else ZERO_TOTALS
    right = right if right is not None else ZERO_TOTALS
    # Decimal equality is numeric (Decimal('1.50') == Decimal('1.5')), which is what "exact" means here.
    return left.value == right.value and left.trade_count == right.trade_count


def differing_keys(expected: Mapping[str, Totals], actual: Mapping[str, Totals]) -> list[str]:
    """The nodes whose totals differ between the two sides, sorted."""
    return [key for key in node_keys(expected, actual) if not same_totals(expected.get(key), actual.get(key))]


def load_ledger(path: Path) -> dict[str, NodeTotals]:
    """Every hierarchy node the ledger expects, by aggregate key.

    Deliberately tolerant of how the format evolves: the map may be under ``aggregates``
    (any capitalisation) or be the whole document, or be a list of items carrying their
    key as ``AggregateKey``/``key``; values may be decimal strings or JSON numbers (parsed
    as exact decimals, never floats); counts may be integers or integer strings; field
    names may be ``Value``/``value`` and ``TradeCount``/``trade_count``/``tradeCount``/
    ``count``. Unrelated top-level fields are ignored; every entry of the map is a node, whatever
    its key starts with.
    """
    return _nodes_of(_read_document(path), path)


@dataclass(frozen=True)
class LedgerMessages:
    """What the producer's ``counts`` say about the messages it sent (the dashboard's backlog).

    ``to_apply`` is how many of them change a trade's state (new trades and modifications,
    moves included): exactly what the reduce stage counts in ``#stats`` ``MessagesApplied``
    once the pipeline has drained. Duplicates, out-of-order older versions, conflicting
    duplicates and malformed records are sent but never applied.
    """

    sent: int
    to_apply: int


def load_ledger_with_messages(path: Path) -> tuple[dict[str, NodeTotals], LedgerMessages | None]:
    """:func:`load_ledger`, plus the message counts when the ledger has the producer's ``counts``
    (one read of the file, so both describe the same moment)."""
    document = _read_document(path)
    return _nodes_of(document, path), _messages_of(document)


def _read_document(path: Path) -> object:
    try:
        return read_json(path)
    except UnreadableFile as error:
        raise LedgerError(str(error)) from None


def _messages_of(document: object) -> LedgerMessages | None:
    counts = document.get("counts") if isinstance(document, dict) else None
    if not isinstance(counts, dict):
        return None
    numbers = {name: counts.get(name) for name in ("messages_sent", "new_trades", "modifications")}
    if not all(isinstance(number, int) and not isinstance(number, bool) for number in numbers.values()):
        return None
    return LedgerMessages(
        sent=int(numbers["messages_sent"]),  # type: ignore[arg-type]
        to_apply=int(numbers["new_trades"]) + int(numbers["modifications"]),  # type: ignore[arg-type]
    )


def _nodes_of(document: object, path: Path) -> dict[str, NodeTotals]:
    entries, whole_document = _entries(document, path)
    nodes: dict[str, NodeTotals] = {}
    for key, entry in entries:
        if not isinstance(entry, dict):
            if whole_document:
                continue  # a top-level field of a document without an aggregates map
            raise LedgerError(f"{path}: entry {key!r} is not an object")
        nodes[key] = NodeTotals(
            value=_exact_decimal(_field(entry, path, "Value", "value"), key, path),
            trade_count=_whole_number(
                _field(entry, path, "TradeCount", "trade_count", "tradeCount", "count"), key, path
            ),
        )
    return nodes


def _entries(document: object, path: Path) -> tuple[list[tuple[str, object]], bool]:
    """The (key, entry) pairs of the aggregates map, and whether that map is the whole document."""
    aggregates: object = document
    if isinstance(document, dict):
        for name, content in document.items():
            if isinstance(name, str) and name.lower() == "aggregates":
                aggregates = content
                break
    if isinstance(aggregates, dict):
        return [(str(key), entry) for key, entry in aggregates.items()], aggregates is document
    if isinstance(aggregates, list):
        entries: list[tuple[str, object]] = []
        for item in aggregates:
            if not isinstance(item, dict):
                raise LedgerError(f"{path}: aggregates list holds a non-object: {item!r}")
            entries.append((str(_field(item, path, "AggregateKey", "aggregate_key", "key")), item))
        return entries, False
    raise LedgerError(f"{path} has no aggregates map")


def _field(entry: Mapping[str, object], path: Path, *names: str) -> object:
    for name in names:
        if name in entry:
            return entry[name]
    raise LedgerError(f"{path}: an entry has none of the fields {', '.join(names)}")


def _exact_decimal(raw: object, key: str, path: Path) -> Decimal:
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


def _whole_number(raw: object, key: str, path: Path) -> int:
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
