"""The ground truth: what the aggregates must be after every sent message is applied.

Why independent: the verifier proves the pipeline exact by comparing it with
this ledger, so the ledger must not share code with the pipeline (nothing from
``lambdas/`` is imported; a shared bug would hide itself). It keeps the final
state of every trade (the highest valid version seen, whatever the arrival
order) and derives the aggregates from those states with its own few lines.

Why the trades are kept and not just the totals: runs merge. A later run may
send new versions of trades an earlier run created (or move them), and only the
per-trade states make that merge exact.

File format (JSON, written atomically, every amount a decimal string)::

    {
      "format": "exactly-once-ledger/1",
      "hierarchy_levels": ["RiskType", "TradeDesk", "Region"],
      "updated_at": "2024-01-01T00:00:00+00:00",
      "counts": {"messages_sent": 0, "new_trades": 0, "modifications": 0, "moves": 0,
                 "duplicates": 0, "out_of_order": 0, "conflicting_duplicates": 0, "malformed": 0, "uncertain": 0,
                 "malformed_by_kind": {"not_json": 0}},
      "runs": [{"seed": 7, "started_at": "...", "messages_sent": 3000, ...}],
      "merged_journals": ["ledger.json.journal-<run>-0", ...],
      "aggregates": {"Delta": {"Value": "123.45", "TradeCount": 3}, ...},
      "trades": {"<TradeID>": {"Version": 3, "Value": "34624.51",
                               "Hierarchy": {"RiskType": "Delta", ...}}, ...}
    }
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from decimal import Context, Decimal, Inexact, InvalidOperation, Rounded, localcontext
from pathlib import Path
from typing import Any

from producer.generator import GeneratedMessage, MessageKind
from producer.journal import journals_of, read_journal
from producer.model import AGGREGATE_KEY_SEPARATOR, DEFAULT_HIERARCHY_LEVELS, AggregateNode, TradeState
from toolkit.files import UnreadableFile, read_json
from toolkit.ledger import LedgerError

LEDGER_FORMAT = "exactly-once-ledger/1"

_EXACT = Context(prec=400, traps=[Inexact, Rounded, InvalidOperation])
"""Decimal arithmetic that raises rather than rounds: sums here are exact or fail."""


@dataclass
class LedgerCounts:
    """How many messages of each kind were sent, summed over every run since the last clear."""

    messages_sent: int = 0
    new_trades: int = 0
    modifications: int = 0
    moves: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    conflicting_duplicates: int = 0
    """Same TradeID and Version as the applied message, other content: reported, never applied."""
    malformed: int = 0
    uncertain: int = 0
    """Messages whose delivery is unknown (a run aborted with them in flight)."""
    malformed_by_kind: dict[str, int] = field(default_factory=dict)


def tally(counts: LedgerCounts, message: GeneratedMessage) -> None:
    """Count one sent message by what the generator meant it to be."""
    counts.messages_sent += 1
    if message.kind is MessageKind.NEW_TRADE:
        counts.new_trades += 1
    elif message.kind is MessageKind.MODIFICATION:
        counts.modifications += 1
    elif message.kind is MessageKind.DUPLICATE:
        counts.duplicates += 1
    elif message.kind is MessageKind.OUT_OF_ORDER:
        counts.out_of_order += 1
    elif message.kind is MessageKind.CONFLICTING_DUPLICATE:
        counts.conflicting_duplicates += 1
    elif message.kind is MessageKind.MALFORMED:
        counts.malformed += 1
        kind = message.malformed_kind or "unknown"
        counts.malformed_by_kind[kind] = counts.malformed_by_kind.get(kind, 0) + 1
    if message.moves:
        counts.moves += 1


def aggregate_keys(hierarchy: tuple[str, ...]) -> list[str]:
    """Every node a trade is under: ``Delta``, ``Delta:FXSpot``, ``Delta:FXSpot:AMER``."""
    return [AGGREGATE_KEY_SEPARATOR.join(hierarchy[: depth + 1]) for depth in range(len(hierarchy))]


def compute_aggregates(trades: Iterable[TradeState]) -> dict[str, AggregateNode]:
    """The exact totals of every node from the trades' final states."""
    values: dict[str, Decimal] = {}
    counts: dict[str, int] = {}
    with localcontext(_EXACT):
        for state in trades:
            for key in aggregate_keys(state.hierarchy):
                values[key] = values.get(key, Decimal(0)) + state.value
                counts[key] = counts.get(key, 0) + 1
    return {key: AggregateNode(value=values[key], trade_count=counts[key]) for key in sorted(values)}


class Ledger:
    """Ground truth accumulated over runs; thread-unsafe, callers serialise ``record``."""

    def __init__(
        self,
        hierarchy_levels: tuple[str, ...] = DEFAULT_HIERARCHY_LEVELS,
        trades: Mapping[str, TradeState] | None = None,
        counts: LedgerCounts | None = None,
        runs: list[dict[str, Any]] | None = None,
        merged_journals: list[str] | None = None,
    ) -> None:
        self.hierarchy_levels = hierarchy_levels
        self.trades: dict[str, TradeState] = dict(trades or {})
        self.counts = counts or LedgerCounts()
        self.runs: list[dict[str, Any]] = list(runs or [])
        self.merged_journals: list[str] = list(merged_journals or [])
        """Journals (`producer.journal`) already applied, by file name: never applied twice."""

    # -- recording -------------------------------------------------------------------

    def observe(self, trade_id: str, state: TradeState) -> None:
        """Apply one valid message: the highest version wins, whatever the order.

        An equal version keeps what is already there, as the pipeline does (its
        condition is ``Version < :version``); the generator never reuses a
        version with different content, so this only ever sees identical copies.
        """
        if len(state.hierarchy) != len(self.hierarchy_levels):
            raise LedgerError(
                f"trade {trade_id} has {len(state.hierarchy)} levels, ledger has {len(self.hierarchy_levels)}"
            )
        current = self.trades.get(trade_id)
        if current is None or state.version > current.version:
            self.trades[trade_id] = state

    def record(self, message: GeneratedMessage) -> None:
        """Account for one message Kinesis accepted.

        A conflicting duplicate is counted, never observed: the first version applied
        stands, and it was sent (hence, per partition key, applied) before the conflict.
        """
        tally(self.counts, message)
        if message.kind is MessageKind.CONFLICTING_DUPLICATE:
            return
        if message.state is not None and message.trade_id is not None:
            self.observe(message.trade_id, message.state)

    def aggregates(self) -> dict[str, AggregateNode]:
        """Expected totals per node, derived from the trades now."""
        return compute_aggregates(self.trades.values())

    # -- persistence -------------------------------------------------------------------

    def to_document(self) -> dict[str, Any]:
        """The JSON document (strings and integers only: no float anywhere)."""
        levels = self.hierarchy_levels
        return {
            "format": LEDGER_FORMAT,
            "hierarchy_levels": list(levels),
            "updated_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "counts": asdict(self.counts),
            "runs": self.runs,
            "merged_journals": self.merged_journals,
            "aggregates": {
                key: {"Value": _decimal_text(node.value), "TradeCount": node.trade_count}
                for key, node in self.aggregates().items()
            },
            "trades": {
                trade_id: {
                    "Version": state.version,
                    "Value": _decimal_text(state.value),
                    "Hierarchy": dict(zip(levels, state.hierarchy, strict=True)),
                }
                for trade_id, state in self.trades.items()
            },
        }

    def save(self, path: Path) -> None:
        """Write atomically: a reader sees the old ledger or the new one, never half."""
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.to_document(), indent=1, ensure_ascii=False, default=_json_default)
        descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def absorb_journals(self, path: Path) -> list[Path]:
        """Apply every journal beside the ledger at `path` not applied yet; returns them all.

        Their accepted messages are recorded, their messages in doubt counted as `uncertain`.
        The caller saves the ledger, then may delete the journals returned.
        """
        journals = journals_of(path)
        for journal in journals:
            if journal.name in self.merged_journals:
                continue
            accepted, in_doubt = read_journal(journal)
            for message in accepted:
                self.record(message)
            self.counts.uncertain += in_doubt
            self.merged_journals.append(journal.name)
        return journals

    @classmethod
    def load(cls, path: Path, hierarchy_levels: tuple[str, ...] | None = None) -> Ledger:
        """Read a ledger and the journals beside it (`absorb_journals`); nothing at all is an
        empty ledger (nothing sent since the last clear).

        ``hierarchy_levels``, when given, must match the file's (or the file must
        be absent): mixing level orders would make the aggregate keys meaningless.
        """
        ledger = cls._load_document(path, hierarchy_levels)
        ledger.absorb_journals(path)
        return ledger

    @classmethod
    def _load_document(cls, path: Path, hierarchy_levels: tuple[str, ...] | None) -> Ledger:
        if not path.exists():
            return cls(hierarchy_levels or DEFAULT_HIERARCHY_LEVELS)
        try:
            document = read_json(path)
        except UnreadableFile as error:
            raise LedgerError(f"ledger: {error}") from None
        ledger = cls.from_document(document, source=str(path))
        if hierarchy_levels is not None and hierarchy_levels != ledger.hierarchy_levels and ledger.trades:
            raise LedgerError(
                f"ledger {path} was built with hierarchy levels {','.join(ledger.hierarchy_levels)}, "
                f"not {','.join(hierarchy_levels)}; run `python -m producer clear` first"
            )
        if hierarchy_levels is not None:
            ledger.hierarchy_levels = hierarchy_levels
        return ledger

    @classmethod
    def from_document(cls, document: Any, source: str = "ledger") -> Ledger:
        """Parse and cross-check a ledger document (the stored aggregates must match the trades)."""
        try:
            if document.get("format") != LEDGER_FORMAT:
                raise LedgerError(f"{source} is not a ledger (format {document.get('format')!r})")
            levels = tuple(str(level) for level in document["hierarchy_levels"])
            trades = {
                str(trade_id): TradeState(
                    version=_integer(entry["Version"]),
                    value=_decimal(entry["Value"]),
                    hierarchy=tuple(str(entry["Hierarchy"][level]) for level in levels),
                )
                for trade_id, entry in document["trades"].items()
            }
            raw_counts = dict(document.get("counts", {}))
            by_kind = {str(kind): _integer(number) for kind, number in raw_counts.pop("malformed_by_kind", {}).items()}
            known = LedgerCounts.__dataclass_fields__
            counts = LedgerCounts(
                **{name: _integer(number) for name, number in raw_counts.items() if name in known},
                malformed_by_kind=by_kind,
            )
            stored = {
                str(key): AggregateNode(value=_decimal(node["Value"]), trade_count=_integer(node["TradeCount"]))
                for key, node in document["aggregates"].items()
            }
            runs = list(document.get("runs", []))
            merged = [str(name) for name in document.get("merged_journals", [])]
        except LedgerError:
            raise
        except (AttributeError, KeyError, TypeError, ValueError, InvalidOperation) as error:
            raise LedgerError(f"{source} is malformed: {type(error).__name__}: {error}") from error
        ledger = cls(levels, trades, counts, runs, merged)
        if stored != ledger.aggregates():
            raise LedgerError(f"{source} is inconsistent: its aggregates do not match its trades")
        return ledger


def _decimal_text(value: Decimal) -> str:
    """Plain notation, exactly (``1E+3`` is written ``1000``)."""
    return format(value, "f")


def _json_default(value: object) -> str:
    """Decimals read back from earlier runs' metadata are written as exact strings."""
    if isinstance(value, Decimal):
        return _decimal_text(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _decimal(raw: Any) -> Decimal:
    """Decimals come back as strings (or, hand-edited, as exact JSON numbers)."""
    if isinstance(raw, bool) or not isinstance(raw, str | int | Decimal):
        raise TypeError(f"expected a decimal, got {raw!r}")
    value = Decimal(raw)
    if not value.is_finite():
        raise ValueError(f"expected a finite decimal, got {raw!r}")
    return value


def _integer(raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise TypeError(f"expected an integer, got {raw!r}")
    return raw
