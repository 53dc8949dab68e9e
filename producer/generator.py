"""Seeded, pure generation of the messages a load test sends.

Why pure: a load test that finds a bug must be repeatable. Everything random is
drawn from one ``random.Random(seed)``, nothing here performs I/O or reads the
clock unless a clock is passed in, so the same seed and configuration always
produce the same byte sequence.

Why the JSON is written by hand: the message ``Value`` is money. It is a
``Decimal`` from the moment it is drawn and its JSON literal is written from
that ``Decimal``, so no binary float ever touches the value path (``json.dumps``
is only used to quote strings).

The stream mixes, in configurable proportions:

* new trades;
* modifications (a higher version of an existing trade, some of which move to
  another hierarchy node);
* duplicates (the identical bytes of an earlier valid message, resent);
* out-of-order pairs (a later version sent first, then an earlier version that
  the pipeline must ignore);
* conflicting duplicates (the current TradeID and Version of a trade with other
  content: the pipeline reports them and keeps the first version applied);
* malformed records of every invalid kind docs/design.md names, and optionally a few
  oversized (~1 MB) invalid records.
"""

from __future__ import annotations

import json
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from random import Random

from producer.model import DEFAULT_HIERARCHY_LEVELS, TradeState

MAX_TRADE_ID_LENGTH = 256
MAX_LEVEL_VALUE_LENGTH = 128
MAX_SIGNIFICANT_DIGITS = 38
VALUE_INTEGER_DIGITS = 18
VALUE_FRACTION_DIGITS = 10
"""The default aggregatable domain (cdk.json `valueIntegerDigits`, `valueFractionDigits`):
every valid Value drawn here lies inside it, and `value_out_of_domain` records lie outside."""
DEFAULT_COUNT = 3000
DEFAULT_DURATION_TRADE_BUDGET = 100_000
"""Cap on distinct trades in duration mode, so memory stays bounded on long runs."""
DUPLICATE_WINDOW = 4096
"""How many recent valid messages a duplicate may repeat (resends are recent in practice)."""
DEFAULT_TIMESTAMP_EPOCH_MS = 1_700_000_000_000

LEVEL_CATALOG: dict[str, tuple[str, ...]] = {
    "RiskType": ("Delta", "Gamma", "Vega", "Theta", "Rho"),
    "TradeDesk": ("FXSpot", "FXOptions", "Rates", "Credit", "Equities"),
    "Region": ("AMER", "EMEA", "APAC"),
}
"""Values of the well-known levels; any other configured level gets ``<Level>-1..4``."""


class MessageKind(StrEnum):
    """Why a message is in the stream; the ledger counts messages by kind."""

    NEW_TRADE = "new_trade"
    MODIFICATION = "modification"
    DUPLICATE = "duplicate"
    OUT_OF_ORDER = "out_of_order"
    CONFLICTING_DUPLICATE = "conflicting_duplicate"
    MALFORMED = "malformed"


OVERSIZED_RECORD_KIND = "oversized_record"
"""A ~1 MB invalid record (its TradeID is far too long): the quarantine stores it truncated.

Not in `MALFORMED_KINDS` because it is sent only on request (`GeneratorConfig.oversized_records`):
a megabyte per record would dominate the bytes of every ordinary load test."""
OVERSIZED_RECORD_BYTES = 1_000_000
"""Under Kinesis' 1 MiB record limit (data plus partition key), far over DynamoDB's 400 KB item."""


@dataclass(frozen=True, slots=True)
class GeneratedMessage:
    """One Kinesis record plus what the generator meant by it.

    ``state`` is the trade state the record carries when it is valid (also for
    duplicates and stale out-of-order versions, which the pipeline must ignore);
    ``None`` for malformed records.
    """

    sequence: int
    data: bytes
    partition_key: str
    kind: MessageKind
    trade_id: str | None
    state: TradeState | None
    moves: bool = False
    malformed_kind: str | None = None


@dataclass(frozen=True)
class GeneratorConfig:
    """What to generate. Percentages are of messages, 0 to 100.

    ``count=None`` makes the stream endless (duration mode); ``trades`` caps the
    number of distinct new trades (``None``: derived from ``count``).
    ``conflicting_pct`` of messages are conflicting duplicates; ``oversized_records``
    ~1 MB invalid records are spread evenly over a finite stream.
    """

    seed: int
    count: int | None = DEFAULT_COUNT
    trades: int | None = None
    duplicates_pct: float = 10.0
    out_of_order_pct: float = 5.0
    modifications_pct: float = 20.0
    malformed_pct: float = 1.0
    conflicting_pct: float = 0.0
    oversized_records: int = 0
    hierarchy_levels: tuple[str, ...] = DEFAULT_HIERARCHY_LEVELS
    move_share: float = 0.3
    timestamp_epoch_ms: int = DEFAULT_TIMESTAMP_EPOCH_MS

    def __post_init__(self) -> None:
        if self.count is not None and self.count < 1:
            raise ValueError("count must be at least 1")
        if self.trades is not None and self.trades < 1:
            raise ValueError("trades must be at least 1")
        if self.trades is not None and self.count is not None and self.trades > self.count:
            raise ValueError(f"trades ({self.trades}) cannot exceed count ({self.count})")
        percentages = {
            "duplicates": self.duplicates_pct,
            "out-of-order": self.out_of_order_pct,
            "modifications": self.modifications_pct,
            "malformed": self.malformed_pct,
            "conflicting duplicates": self.conflicting_pct,
        }
        for name, pct in percentages.items():
            if not 0 <= pct <= 100:
                raise ValueError(f"{name} percentage must be between 0 and 100, got {pct}")
        if sum(percentages.values()) > 100:
            raise ValueError(
                "duplicates + out-of-order + modifications + malformed + conflicting percentages exceed 100"
            )
        if self.oversized_records < 0:
            raise ValueError("oversized_records cannot be negative")
        if self.oversized_records and self.count is None:
            raise ValueError("oversized records need a finite count (they are spread over the stream)")
        if self.count is not None and self.oversized_records > self.count // 2:
            raise ValueError(f"oversized_records ({self.oversized_records}) exceeds half of count ({self.count})")
        if not self.hierarchy_levels:
            raise ValueError("at least one hierarchy level is required")
        if not 0 <= self.move_share <= 1:
            raise ValueError("move_share must be between 0 and 1")

    @property
    def new_trade_share(self) -> float:
        """Fraction of messages that introduce a new trade."""
        other = (
            self.duplicates_pct
            + self.out_of_order_pct
            + self.modifications_pct
            + self.malformed_pct
            + self.conflicting_pct
        )
        return max(0.0, 100.0 - other) / 100.0

    def trade_budget(self) -> int:
        """How many distinct new trades this stream introduces at most."""
        if self.trades is not None:
            return self.trades
        if self.count is None:
            return DEFAULT_DURATION_TRADE_BUDGET
        return max(1, round((self.count - self.oversized_records) * self.new_trade_share))

    def oversized_positions(self) -> frozenset[int]:
        """The sequence numbers of the oversized records: evenly spread, never first or last."""
        if self.count is None or not self.oversized_records:
            return frozenset()
        spacing = self.count / (self.oversized_records + 1)
        return frozenset(round(spacing * (index + 1)) for index in range(self.oversized_records))


def decimal_json_literal(value: Decimal) -> str:
    """The exact JSON number literal of a finite Decimal, in plain notation."""
    if not value.is_finite():
        raise ValueError(f"{value} has no JSON literal")
    if value.is_zero():
        value = abs(value)  # never write "-0"
    return format(value, "f")


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def decoy_level(levels: Sequence[str]) -> str:
    """The name of the extra, unconfigured hierarchy level some messages carry (ignored by the pipeline):
    ``Book``, unless a configured level has that name (README's own example, ``Desk,Book``), then one
    no level has. A message never names a key twice: which of two values a JSON parser keeps is not
    for a message's meaning to depend on (the door refuses such a record, docs/design.md)."""
    name = "Book"
    while name in levels:
        name = f"Other{name}"
    return name


def _assemble(fields: Mapping[str, str]) -> str:
    """A JSON object from already-encoded field literals, in the given order."""
    return "{" + ", ".join(f"{_quote(name)}: {literal}" for name, literal in fields.items()) + "}"


class MessageGenerator(Iterator[GeneratedMessage]):
    """An iterator of messages, deterministic for a given config and seed.

    ``existing_trades`` (typically the ledger of earlier runs) lets a run send
    new versions of trades it did not create, continuing from their versions.
    ``clock`` supplies the ``Timestamp`` field (seconds since the epoch, used by
    the pipeline only for latency); without it timestamps are
    ``timestamp_epoch_ms`` plus one millisecond per message, keeping the whole
    byte sequence reproducible.
    """

    def __init__(
        self,
        config: GeneratorConfig,
        existing_trades: Mapping[str, TradeState] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.config = config
        self._rng = Random(config.seed)
        self._clock = clock
        self._levels = config.hierarchy_levels
        self._decoy_level = decoy_level(self._levels)
        self._level_values = tuple(
            LEVEL_CATALOG.get(level, tuple(f"{level}-{index}" for index in range(1, 5))) for level in self._levels
        )
        self._trades: dict[str, TradeState] = dict(existing_trades or {})
        self._trade_ids: list[str] = list(self._trades)
        self._budget = config.trade_budget()
        self._created = 0
        self._produced = 0
        self._pending: deque[GeneratedMessage] = deque()
        self._recent_valid: deque[GeneratedMessage] = deque(maxlen=DUPLICATE_WINDOW)
        self._oversized_due = deque(sorted(config.oversized_positions()))

    # -- iteration -----------------------------------------------------------------

    def __iter__(self) -> MessageGenerator:
        return self

    def __next__(self) -> GeneratedMessage:
        if self._pending:
            return self._pending.popleft()
        count = self.config.count
        if count is not None and self._produced >= count:
            raise StopIteration
        remaining = None if count is None else count - self._produced
        if self._oversized_due and self._produced >= self._oversized_due[0]:
            # (an out-of-order pair may have taken the exact position: the record comes next)
            self._oversized_due.popleft()
            return self._oversized()
        kind = self._choose_kind(remaining)
        if kind is MessageKind.CONFLICTING_DUPLICATE:
            return self._conflicting_duplicate()
        if kind is MessageKind.MALFORMED:
            return self._malformed()
        if kind is MessageKind.DUPLICATE:
            return self._duplicate()
        if kind is MessageKind.OUT_OF_ORDER:
            later, earlier = self._out_of_order_pair()
            self._pending.append(earlier)
            return later
        if kind is MessageKind.MODIFICATION:
            return self._modification()
        return self._new_trade()

    @property
    def trades(self) -> Mapping[str, TradeState]:
        """The latest state the generator has emitted for every trade it knows."""
        return self._trades

    # -- choosing what comes next ---------------------------------------------------

    def _choose_kind(self, remaining: int | None) -> MessageKind:
        config = self.config
        draw = self._rng.random() * 100.0
        thresholds = (
            (config.malformed_pct, MessageKind.MALFORMED),
            (config.duplicates_pct, MessageKind.DUPLICATE),
            (config.conflicting_pct, MessageKind.CONFLICTING_DUPLICATE),
            (config.out_of_order_pct, MessageKind.OUT_OF_ORDER),
            (config.modifications_pct, MessageKind.MODIFICATION),
        )
        kind = MessageKind.NEW_TRADE
        upper = 0.0
        for pct, candidate in thresholds:
            upper += pct
            if draw < upper:
                kind = candidate
                break
        budget_left = self._budget - self._created
        # In count mode, every budgeted trade must appear before the stream ends.
        if remaining is not None and budget_left >= remaining:
            return MessageKind.NEW_TRADE
        if kind is MessageKind.OUT_OF_ORDER and remaining is not None and budget_left > remaining - 2:
            # Two slots would leave too few for the budgeted new trades (or the stream).
            kind = MessageKind.NEW_TRADE if budget_left > 0 else MessageKind.MODIFICATION
        if kind is MessageKind.DUPLICATE and not self._recent_valid:
            kind = MessageKind.MODIFICATION
        if kind is MessageKind.CONFLICTING_DUPLICATE and not self._trade_ids:
            kind = MessageKind.NEW_TRADE if budget_left > 0 else MessageKind.MALFORMED
        if kind is MessageKind.OUT_OF_ORDER and not self._trade_ids and budget_left <= 0:
            kind = MessageKind.MODIFICATION
        if kind is MessageKind.MODIFICATION and not self._trade_ids:
            kind = MessageKind.NEW_TRADE
        if kind is MessageKind.NEW_TRADE and budget_left <= 0:
            kind = MessageKind.MODIFICATION if self._trade_ids else MessageKind.MALFORMED
        return kind

    # -- random building blocks ----------------------------------------------------------

    def _timestamp_literal(self) -> str:
        if self._clock is not None:
            return f"{self._clock():.6f}"
        millis = self.config.timestamp_epoch_ms + self._produced
        return f"{millis // 1000}.{millis % 1000:03d}"

    def _new_trade_id(self) -> str:
        while True:
            trade_id = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
            if self._rng.random() < 0.002:
                # Boundary case: exactly the longest TradeID docs/design.md allows.
                trade_id = (trade_id + "-").ljust(MAX_TRADE_ID_LENGTH, "b")
            if trade_id not in self._trades:
                return trade_id

    def _random_value(self) -> Decimal:
        """A money amount, exactly; mostly 2 decimal places, sometimes precision traps."""
        rng = self._rng
        roll = rng.random()
        if roll < 0.94:
            return Decimal(rng.randint(-5_000_000, 10_000_000)).scaleb(-2)
        if roll < 0.965:
            # The classic binary-float traps: 0.1 + 0.2 != 0.3 in float.
            return Decimal(rng.choice(("0.1", "0.2", "0.3", "0.7", "1.1", "2.675", "1.005")))
        if roll < 0.99:
            # 20 significant digits with 10 decimal places: float keeps only ~16.
            sign = rng.choice((1, -1))
            return Decimal(sign * rng.randrange(10**19, 10**20)).scaleb(-10)
        return Decimal(rng.choice(("1E+3", "2.5E+2", "1.25E-2", "-7.5E+1")))

    def _value_literal(self, value: Decimal) -> str:
        """JSON literal for a value; values drawn in exponent form keep that form."""
        text = str(value)
        if "E" in text:
            return text
        return decimal_json_literal(value)

    def _random_hierarchy(self) -> tuple[str, ...]:
        if self._rng.random() < 0.002:
            # Boundary case: one level value of exactly the maximum length.
            position = self._rng.randrange(len(self._levels))
            values = [self._rng.choice(options) for options in self._level_values]
            values[position] = values[position].ljust(MAX_LEVEL_VALUE_LENGTH, "x")
            return tuple(values)
        return tuple(self._rng.choice(options) for options in self._level_values)

    def _moved_hierarchy(self, current: tuple[str, ...]) -> tuple[str, ...]:
        """A different node: at least one level changes."""
        while True:
            changed = tuple(
                self._rng.choice(options) if self._rng.random() < 0.6 else value
                for value, options in zip(current, self._level_values, strict=True)
            )
            if changed != current:
                return changed

    def _valid_fields(self, trade_id: str, state: TradeState, *, decorate: bool = True) -> dict[str, str]:
        """The JSON literals of a valid message, sometimes with ignorable extras."""
        rng = self._rng
        hierarchy_pairs = list(zip(self._levels, state.hierarchy, strict=True))
        if decorate and rng.random() < 0.3:
            rng.shuffle(hierarchy_pairs)  # key order carries no meaning
        if decorate and rng.random() < 0.05:
            hierarchy_pairs.append((self._decoy_level, f"B{rng.randint(1, 9)}"))  # unconfigured level: ignored
        hierarchy = _assemble({level: _quote(value) for level, value in hierarchy_pairs})
        fields = {
            "TradeID": _quote(trade_id),
            "Value": self._value_literal(state.value),
            "Version": str(state.version),
            "Timestamp": self._timestamp_literal(),
            "Hierarchy": hierarchy,
        }
        if decorate and rng.random() < 0.05:
            fields["Source"] = _quote("producer")  # extra fields are allowed and ignored
        return fields

    def _emit(
        self,
        kind: MessageKind,
        data: bytes,
        partition_key: str,
        trade_id: str | None,
        state: TradeState | None,
        *,
        moves: bool = False,
        malformed_kind: str | None = None,
        may_be_duplicated: bool = True,
    ) -> GeneratedMessage:
        message = GeneratedMessage(
            sequence=self._produced,
            data=data,
            partition_key=partition_key,
            kind=kind,
            trade_id=trade_id,
            state=state,
            moves=moves,
            malformed_kind=malformed_kind,
        )
        self._produced += 1
        if state is not None and may_be_duplicated:
            self._recent_valid.append(message)
        return message

    def _valid_message(
        self, kind: MessageKind, trade_id: str, state: TradeState, *, moves: bool = False
    ) -> GeneratedMessage:
        data = _assemble(self._valid_fields(trade_id, state)).encode("utf-8")
        return self._emit(kind, data, trade_id, trade_id, state, moves=moves)

    def _remember(self, trade_id: str, state: TradeState) -> None:
        if trade_id not in self._trades:
            self._trade_ids.append(trade_id)
            self._created += 1
        self._trades[trade_id] = state

    # -- message kinds ------------------------------------------------------------------

    def _new_trade(self) -> GeneratedMessage:
        trade_id = self._new_trade_id()
        state = TradeState(version=1, value=self._random_value(), hierarchy=self._random_hierarchy())
        self._remember(trade_id, state)
        return self._valid_message(MessageKind.NEW_TRADE, trade_id, state)

    def _next_state(self, current: TradeState) -> tuple[TradeState, bool]:
        version = current.version + self._rng.choice((1, 1, 1, 2, 3))
        moves = self._rng.random() < self.config.move_share
        hierarchy = self._moved_hierarchy(current.hierarchy) if moves else current.hierarchy
        return TradeState(version=version, value=self._random_value(), hierarchy=hierarchy), moves

    def _modification(self) -> GeneratedMessage:
        trade_id = self._rng.choice(self._trade_ids)
        state, moves = self._next_state(self._trades[trade_id])
        self._remember(trade_id, state)
        return self._valid_message(MessageKind.MODIFICATION, trade_id, state, moves=moves)

    def _duplicate(self) -> GeneratedMessage:
        original = self._rng.choice(self._recent_valid)
        return self._emit(
            MessageKind.DUPLICATE, original.data, original.partition_key, original.trade_id, original.state
        )

    def _out_of_order_pair(self) -> tuple[GeneratedMessage, GeneratedMessage]:
        """A later version, then an earlier one that must not win."""
        use_existing = bool(self._trade_ids) and (self._budget - self._created <= 0 or self._rng.random() < 0.8)
        if use_existing:
            trade_id = self._rng.choice(self._trade_ids)
            current = self._trades[trade_id]
            earlier_version = current.version + 1
            later, _ = self._next_state(TradeState(earlier_version, current.value, current.hierarchy))
            later_kind = MessageKind.MODIFICATION
            moves = later.hierarchy != current.hierarchy
        else:
            trade_id = self._new_trade_id()
            earlier_version = self._rng.choice((0, 1))
            later = TradeState(version=2, value=self._random_value(), hierarchy=self._random_hierarchy())
            later_kind = MessageKind.NEW_TRADE
            moves = False
        self._remember(trade_id, later)
        later_message = self._valid_message(later_kind, trade_id, later, moves=moves)
        # The stale version carries its own value, and sometimes another node, so
        # that a pipeline applying it would visibly change the totals.
        stale_hierarchy = self._moved_hierarchy(later.hierarchy) if self._rng.random() < 0.3 else later.hierarchy
        stale = TradeState(version=earlier_version, value=self._random_value(), hierarchy=stale_hierarchy)
        stale_message = self._valid_message(MessageKind.OUT_OF_ORDER, trade_id, stale)
        return later_message, stale_message

    def _conflicting_duplicate(self) -> GeneratedMessage:
        """The current TradeID and Version of a trade with another Value (sometimes another node).

        Why the trade's *current* version, and why the trade is retired afterwards (no later
        version, out-of-order pair or trap names it again): the pipeline can only tell a
        conflict when the version it holds is the conflicting one. Kinesis and Lambda keep one
        partition key's records in order, so the original reaches the state table first and
        stands (sent in KPL aggregates, the conflict goes under the key of the record that
        carried the original: `producer.sender.Carriers`); a later version of the trade in the
        same batch would make the conflict merely stale. The conflict is never resent as a
        `DUPLICATE` either, so the ledger's count of conflicts is exactly what the pipeline must
        report.
        """
        position = self._rng.randrange(len(self._trade_ids))
        trade_id = self._trade_ids[position]
        self._trade_ids[position] = self._trade_ids[-1]
        self._trade_ids.pop()
        current = self._trades[trade_id]
        value = self._random_value()
        while value.normalize() == current.value.normalize():
            value = self._random_value()
        hierarchy = self._moved_hierarchy(current.hierarchy) if self._rng.random() < 0.3 else current.hierarchy
        conflict = TradeState(version=current.version, value=value, hierarchy=hierarchy)
        data = _assemble(self._valid_fields(trade_id, conflict)).encode("utf-8")
        return self._emit(
            MessageKind.CONFLICTING_DUPLICATE, data, trade_id, trade_id, conflict, may_be_duplicated=False
        )

    def _oversized(self) -> GeneratedMessage:
        """A ~1 MB record that is invalid only because its TradeID is far too long."""
        trade_id = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
        template = TradeState(1, self._random_value(), self._random_hierarchy())
        fields = self._valid_fields(trade_id, template, decorate=False)
        padding = OVERSIZED_RECORD_BYTES - len(_assemble(fields).encode("utf-8"))
        fields["TradeID"] = _quote(trade_id + "-" + "o" * max(MAX_TRADE_ID_LENGTH, padding - 1))
        data = _assemble(fields).encode("utf-8")
        return self._emit(MessageKind.MALFORMED, data, trade_id, None, None, malformed_kind=OVERSIZED_RECORD_KIND)

    def _malformed(self) -> GeneratedMessage:
        rng = self._rng
        kind = rng.choice(MALFORMED_KINDS)
        fresh_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        if self._trade_ids and rng.random() < 0.5:
            # A trap: an invalid record naming a real trade with a higher version.
            # Accepting it by mistake would make the trade's later versions stale.
            trade_id = rng.choice(self._trade_ids)
            current = self._trades[trade_id]
            template = TradeState(current.version + 1, self._random_value(), current.hierarchy)
        else:
            trade_id = fresh_id
            template = TradeState(1, self._random_value(), self._random_hierarchy())
        data = self._malformed_bytes(kind, trade_id, template)
        return self._emit(MessageKind.MALFORMED, data, trade_id, None, None, malformed_kind=kind)

    def _malformed_bytes(self, kind: str, trade_id: str, template: TradeState) -> bytes:
        """A record breaking exactly one docs/design.md rule (``kind``)."""
        record = _ValidRecord(
            rng=self._rng,
            fields=self._valid_fields(trade_id, template, decorate=False),
            trade_id=trade_id,
            template=template,
            levels=dict(zip(self._levels, template.hierarchy, strict=True)),
            level=self._rng.choice(self._levels),
        )
        return MUTATIONS[kind](record)


@dataclass(frozen=True)
class _ValidRecord:
    """A valid message about to be broken: its field literals and what they were made from."""

    rng: Random
    fields: dict[str, str]
    trade_id: str
    template: TradeState
    levels: dict[str, str]
    """Hierarchy level -> value, in the configured order."""
    level: str
    """The level a hierarchy mutation breaks."""

    def assembled(self) -> bytes:
        return _assemble(self.fields).encode("utf-8")


Mutation = Callable[[_ValidRecord], bytes]
Literal = Callable[[_ValidRecord], str]


def _without(field: str) -> Mutation:
    """The record without `field`."""

    def mutate(record: _ValidRecord) -> bytes:
        del record.fields[field]
        return record.assembled()

    return mutate


def _with(field: str, literal: Literal) -> Mutation:
    """The record with `field` replaced by an invalid literal."""

    def mutate(record: _ValidRecord) -> bytes:
        record.fields[field] = literal(record)
        return record.assembled()

    return mutate


def _constant(literal: str) -> Literal:
    return lambda _record: literal


def _one_of(*literals: str) -> Literal:
    return lambda record: record.rng.choice(literals)


def _with_level(literal: Callable[[str], str | None]) -> Mutation:
    """The record whose chosen hierarchy level's value has the literal `literal(value)`, or none if None."""

    def hierarchy(record: _ValidRecord) -> str:
        literals = {
            name: _quote(value) if name != record.level else literal(value) for name, value in record.levels.items()
        }
        return _assemble({name: text for name, text in literals.items() if text is not None})

    return _with("Hierarchy", hierarchy)


def _not_utf8(record: _ValidRecord) -> bytes:
    record.fields["TradeID"] = _quote("@@NOT_UTF8@@")
    return record.assembled().replace(b"@@NOT_UTF8@@", b"\xff\xfe\xc3\x28")


def _not_json(record: _ValidRecord) -> bytes:
    text = _assemble(record.fields)
    return text[: record.rng.randint(1, len(text) - 1)].encode("utf-8")


def _not_object(record: _ValidRecord) -> bytes:
    text = record.rng.choice(("[" + _assemble(record.fields) + "]", _quote(record.trade_id), "42", "null", "true"))
    return text.encode("utf-8")


def _value_with_too_many_digits(record: _ValidRecord) -> str:
    rng = record.rng
    digits = rng.randint(MAX_SIGNIFICANT_DIGITS + 1, MAX_SIGNIFICANT_DIGITS + 8)
    body = str(rng.randint(1, 9)) + "".join(str(rng.randint(0, 9)) for _ in range(digits - 2))
    body += str(rng.randint(1, 9))
    point = rng.randint(1, digits - 1)
    return body[:point] + "." + body[point:]


def _value_out_of_domain(record: _ValidRecord) -> str:
    """A DynamoDB number, but one whose sums with other values could outgrow 38 digits."""
    too_large = "1" + "0" * VALUE_INTEGER_DIGITS
    too_fine = "0." + "0" * VALUE_FRACTION_DIGITS + "1"
    return record.rng.choice((too_large, "-" + too_large, too_fine, "-" + too_fine, "1E+30"))


def _hierarchy_not_object(record: _ValidRecord) -> str:
    hierarchy = record.template.hierarchy
    return record.rng.choice(
        ("[" + ", ".join(_quote(value) for value in hierarchy) + "]", _quote(":".join(hierarchy)), "null")
    )


MUTATIONS: dict[str, Mutation] = {
    "not_utf8": _not_utf8,
    "not_json": _not_json,
    "not_object": _not_object,
    "trade_id_missing": _without("TradeID"),
    "trade_id_empty": _with("TradeID", _constant('""')),
    "trade_id_too_long": _with("TradeID", lambda record: _quote(record.trade_id.ljust(MAX_TRADE_ID_LENGTH + 1, "z"))),
    "trade_id_not_string": _with("TradeID", lambda record: str(record.rng.randint(1, 10**9))),
    "version_missing": _without("Version"),
    "version_float": _with(
        "Version",
        lambda record: record.rng.choice((f"{record.template.version}.0", f"{record.template.version}.5", "1e2")),
    ),
    "version_string": _with("Version", lambda record: _quote(str(record.template.version))),
    "version_bool": _with("Version", _one_of("true", "false")),
    "version_negative": _with("Version", lambda record: str(-record.rng.randint(1, 5))),
    "value_missing": _without("Value"),
    "value_nan": _with("Value", _constant("NaN")),
    "value_infinity": _with("Value", _one_of("Infinity", "-Infinity")),
    "value_string": _with("Value", lambda record: _quote(decimal_json_literal(record.template.value))),
    "value_bool": _with("Value", _one_of("true", "false")),
    "value_too_many_digits": _with("Value", _value_with_too_many_digits),
    "value_out_of_domain": _with("Value", _value_out_of_domain),
    "timestamp_missing": _without("Timestamp"),
    "timestamp_nan": _with("Timestamp", _constant("NaN")),
    "timestamp_infinity": _with("Timestamp", _one_of("Infinity", "-Infinity")),
    "timestamp_string": _with("Timestamp", lambda record: _quote(record.fields["Timestamp"])),
    "hierarchy_missing": _without("Hierarchy"),
    "hierarchy_not_object": _with("Hierarchy", _hierarchy_not_object),
    "hierarchy_missing_level": _with_level(lambda _value: None),
    "hierarchy_empty_level": _with_level(lambda _value: _quote("")),
    "hierarchy_level_with_colon": _with_level(lambda value: _quote(f"{value}:X")),
    "hierarchy_level_too_long": _with_level(lambda value: _quote(value.ljust(MAX_LEVEL_VALUE_LENGTH + 1, "y"))),
    "hierarchy_level_not_string": _with_level(lambda _value: "7"),
}
"""Each invalid-record kind the generator produces -> how it breaks a valid record.

Each mutation breaks exactly one docs/design.md rule and draws its randomness from the record's
generator, in a fixed order, so a seed still gives the same bytes."""

MALFORMED_KINDS: tuple[str, ...] = tuple(MUTATIONS)
"""Every invalid-record kind the generator produces, in the order a kind is drawn from."""


def generate_messages(
    config: GeneratorConfig, existing_trades: Mapping[str, TradeState] | None = None
) -> list[GeneratedMessage]:
    """All messages of a finite config, with reproducible timestamps (for tests and tools)."""
    if config.count is None:
        raise ValueError("generate_messages needs a finite count")
    return list(MessageGenerator(config, existing_trades))
