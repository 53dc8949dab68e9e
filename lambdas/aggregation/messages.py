"""Parsing and validation of trade messages, as docs/design.md ("Messages") states, with the
bounds that keep every later write storable (the Value's aggregatable domain, level
values of at most 128 UTF-8 bytes, no lone surrogates in strings) and the rule that keeps
what the operator sees unforgeable (no control characters in TradeIDs and level values).

A record that fails any rule raises `InvalidMessage` with a reason a person can
act on; the state function quarantines it with that reason and moves on, so one
bad record never blocks its shard.
"""

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from json.encoder import encode_basestring_ascii
from typing import Any, NoReturn, TypeGuard

from aggregation.exact import DYNAMODB_MAX_DIGITS, canonical_number, storable_canonical, storable_parts
from aggregation.hierarchy import KEY_SEPARATOR, MAX_LEVEL_VALUE_BYTES
from aggregation.value_domain import DEFAULT_VALUE_DOMAIN, ValueDomain

MAX_TRADE_ID_LENGTH = 256
LATEST_TIMESTAMP = Decimal(10) ** 11
"""Timestamps (seconds since the epoch) from 0 up to this (year 5138) are kept for latency;
others are dropped, so no absurd figure can break the reduce stage's latency arithmetic."""
VERSION_LIMIT = 10**DYNAMODB_MAX_DIGITS
"""Versions are integers below this (at most 38 digits): every integer up to it is a DynamoDB
number, written as its digits, and compared exactly by the state write's condition."""


UNSAFE_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""C0 controls, DEL, C1 controls, and the bidirectional embeddings, overrides and isolates: refused
in TradeIDs and level values, which every operator tool shows. A terminal acts on escape sequences
(clear the screen, set the title, write the clipboard) and both terminals and browsers reorder
text after a bidirectional override, so a producer could repaint what the operator sees. The
operator tools escape the same class (`toolkit.untrusted`, which cannot import this module)."""


class InvalidMessage(ValueError):
    """The record is not a valid trade message; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class TradeMessage:
    """A valid message. Numbers are in the canonical form they are written in
    (`aggregation.exact.canonical_number`: `0E+500` is `0`); `timestamp` is None when it
    cannot be stored (latency only)."""

    trade_id: str
    version: int
    value: Decimal
    timestamp: Decimal | None
    hierarchy: tuple[str, ...]  # values in the configured level order

    content_digest: str = field(init=False, repr=False, compare=False)
    """`content_digest(value, hierarchy)`: tells a duplicate (same TradeID, Version and content)
    from a conflict (same version, other content), `aggregation.batches.is_conflicting_duplicate`.

    Computed when the message is built: the state function reads it for every message (the
    write, its outcome and the conflict check), and a plain field costs less than
    `functools.cached_property`, whose first read takes a lock on 3.11.
    """

    def __post_init__(self) -> None:
        object.__setattr__(self, "content_digest", content_digest(self.value, self.hierarchy))


def content_digest(value: Decimal, hierarchy: Sequence[str]) -> str:
    """SHA-256 of what the aggregates see of a message: its Value and its `hierarchy` values, in order.

    The value is normalised, so `1.0` and `1.00` are the same content; the timestamp is left out
    because it only measures latency. The same function digests a stored version's Value and
    level values (`aggregation.batches.stored_content_digest`), so the two are equal exactly
    when the contents are.
    """
    # The compact JSON `json.dumps([value, hierarchy], separators=(",", ":"))` gives, written out
    # with the encoder's own string quoting: every release wrote this digest as an item's ContentDigest,
    # which the state functions of those releases compare (while a deploy replaces them, or after a
    # rollback), so the text must stay exactly this. Half the encoder's cost.
    # A Decimal's text is digits, sign, point and exponent: its JSON string is itself in quotes.
    # The text of a finite number whose mantissa ends in a non-zero digit is already canonical
    # (that digit ends its coefficient), as every parsed Value's is: no second reading of its digits.
    text = str(value)
    if not (value.is_finite() and text.partition("E")[0][-1] != "0"):
        text = str(canonical_number(value))
    levels = ",".join(map(encode_basestring_ascii, hierarchy))
    canonical = f'["{text}",[{levels}]]'
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _reject(reason: str) -> NoReturn:
    raise InvalidMessage(reason)


def _reject_constant(name: str) -> NoReturn:
    _reject(f"JSON constant {name} is not a finite number")


MAX_QUOTED_KEY_CHARACTERS = 64
"""A duplicate key is quoted in the quarantine reason up to this many characters."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refused when it names a key twice: parsers differ on which value they keep (the
    first, the last, an error), so such a record has no one meaning (docs/design.md, "Messages")."""
    document = dict(pairs)
    if len(document) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:  # pragma: no branch - a duplicate is there
            if name in seen:
                _reject(f"record names the key {encode_basestring_ascii(name[:MAX_QUOTED_KEY_CHARACTERS])} twice")
            seen.add(name)
    return document


DECODER = json.JSONDecoder(parse_float=Decimal, parse_constant=_reject_constant, object_pairs_hook=_object)
"""Built once: `json.loads` with these options builds a decoder per call, a tenth of parsing a message."""


def _decode_json_object(data: bytes) -> dict[str, Any]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        _reject(f"record is not UTF-8 (byte {error.start})")
    try:
        if text.startswith("\ufeff"):  # refused as `json.loads` refuses it
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        document = DECODER.decode(text)
    except InvalidMessage:
        raise
    except (ValueError, RecursionError) as error:
        _reject(f"record is not JSON: {error}")
    except ArithmeticError as error:  # decimal.InvalidOperation: an exponent beyond any Decimal's
        _reject(f"record holds a number whose exponent no decimal can hold ({type(error).__name__})")
    if not isinstance(document, dict):
        _reject(f"record is a JSON {type(document).__name__}, not an object")
    return document


def _is_json_number(value: object) -> TypeGuard[int | Decimal]:
    return isinstance(value, (int, Decimal)) and not isinstance(value, bool)


def _utf8_length(text: str, field: str) -> int:
    """Bytes of `text` in UTF-8; a JSON escape of a lone surrogate (`"\\ud800"`) has none,
    and DynamoDB could not store it."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        _reject(f"{field} is not valid Unicode (lone surrogate)")


def _refuse_unsafe_characters(text: str, field: str) -> None:
    """Reject `text` if it holds an `UNSAFE_CHARACTERS` character. Callers may skip text that is ASCII
    and printable (`str.isprintable`): ASCII's only unprintable characters, C0 and DEL, are all unsafe,
    the rest of the class is not ASCII, so such text cannot hold one (and has no lone surrogate)."""
    unsafe = UNSAFE_CHARACTERS.search(text)
    if unsafe is not None:
        _reject(f"{field} contains a control or bidirectional-control character (U+{ord(unsafe.group()):04X})")


def _trade_id(document: dict[str, Any]) -> str:
    trade_id = document.get("TradeID")
    if not isinstance(trade_id, str):
        _reject("TradeID is missing or not a string")
    if not trade_id:
        _reject("TradeID is empty")
    if len(trade_id) > MAX_TRADE_ID_LENGTH:
        _reject(f"TradeID is longer than {MAX_TRADE_ID_LENGTH} characters")
    if not (trade_id.isascii() and trade_id.isprintable()):  # else neither check can fail (`_refuse_unsafe_characters`)
        _utf8_length(trade_id, "TradeID")
        _refuse_unsafe_characters(trade_id, "TradeID")
    return trade_id


def _version(document: dict[str, Any]) -> int:
    version = document.get("Version")
    if not isinstance(version, int) or isinstance(version, bool):
        _reject("Version is missing or not a JSON integer")
    if version < 0:
        _reject("Version is negative")
    if version >= VERSION_LIMIT:
        _reject(f"Version has more than {DYNAMODB_MAX_DIGITS} digits (at most 10^{DYNAMODB_MAX_DIGITS} - 1)")
    return version


def _value(document: dict[str, Any], domain: ValueDomain) -> Decimal:
    value = document.get("Value")
    if not _is_json_number(value):
        _reject("Value is missing or not a JSON number")
    exact = value if isinstance(value, Decimal) else Decimal(value)
    parts = storable_parts(exact)  # a JSON number is finite
    if parts is None:
        _reject("Value is not representable as a DynamoDB number (38 significant digits, 1E-130..1E+126)")
    canonical, digits, exponent = parts
    outside = domain.parts_violation(digits, exponent)
    if outside is not None:
        _reject(f"Value {exact} is outside the aggregatable domain: {outside}")
    return canonical


def _timestamp(document: dict[str, Any]) -> Decimal | None:
    timestamp = document.get("Timestamp")
    if not _is_json_number(timestamp):
        _reject("Timestamp is missing or not a JSON number")
    exact = timestamp if isinstance(timestamp, Decimal) else Decimal(timestamp)
    # Only used for latency: a finite timestamp DynamoDB cannot hold, or no plausible
    # time, is dropped, not rejected. Storable is decided first, without a context, so
    # the comparisons only ever see numbers of at most 38 digits.
    canonical = storable_canonical(exact)  # a JSON number is finite
    if canonical is None:
        return None
    return canonical if 0 <= canonical < LATEST_TIMESTAMP else None


def _hierarchy(document: dict[str, Any], levels: Sequence[str]) -> tuple[str, ...]:
    hierarchy = document.get("Hierarchy")
    if not isinstance(hierarchy, dict):
        _reject("Hierarchy is missing or not an object")
    path = []
    for level in levels:
        name = hierarchy.get(level)
        if not isinstance(name, str):
            _reject(f"Hierarchy.{level} is missing or not a string")
        if not name:
            _reject(f"Hierarchy.{level} is empty")
        ascii_text = name.isascii()
        if (len(name) if ascii_text else _utf8_length(name, f"Hierarchy.{level}")) > MAX_LEVEL_VALUE_BYTES:
            _reject(f"Hierarchy.{level} is longer than {MAX_LEVEL_VALUE_BYTES} bytes in UTF-8")
        if KEY_SEPARATOR in name:
            _reject(f"Hierarchy.{level} contains '{KEY_SEPARATOR}'")
        if not (ascii_text and name.isprintable()):
            _refuse_unsafe_characters(name, f"Hierarchy.{level}")
        path.append(name)
    return tuple(path)


def parse_trade_message(data: bytes, levels: Sequence[str], domain: ValueDomain = DEFAULT_VALUE_DOMAIN) -> TradeMessage:
    """Parse one Kinesis record; raise `InvalidMessage` unless docs/design.md calls it valid
    and its Value lies in the aggregatable `domain` (`aggregation.value_domain`).

    Numbers are parsed as `Decimal` straight from the JSON text, never through a
    binary float. Extra fields, and extra hierarchy levels, are ignored; a record that names
    any key twice, at any depth, is refused (no parser's choice of value decides its meaning).
    """
    document = _decode_json_object(data)
    return TradeMessage(
        trade_id=_trade_id(document),
        version=_version(document),
        value=_value(document, domain),
        timestamp=_timestamp(document),
        hierarchy=_hierarchy(document, levels),
    )
