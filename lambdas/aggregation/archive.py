"""The audit archive's documents: object keys, the delta object, the registry and its merges.

Pure, like the rest of the domain: the archive function and the operator tools (`audit`)
do the S3 calls; everything that decides *what* is written, and whether a write may count,
lives here so it can be tested without S3.

Layout of the bucket:

* ``deltas/<first 2 hex characters of the batch hash>/<batch hash>.json``: one immutable
  object per DeltaTable item, written once with ``If-None-Match: *``.
* ``metastore/registry.json``: what has been archived, updated by compare-and-swap
  (``If-Match: <ETag read>``) and created with ``If-None-Match: *``.

Why the registry counts exactly (see `claim_objects` and `settle_objects`): a plain "count
the objects this invocation created" loses every object created by an attempt that failed
before its registry update (the retry sees 412 for them), and DynamoDB stream events carry
no shard id, so a per-shard sequence watermark cannot be kept either. Instead each
invocation *claims* its objects in the registry before writing them (a write-ahead intent
owned by the batch) and *settles* the claims after: a claim turns into a count exactly once,
when the settle that removes it commits. A retried batch finds its own earlier claims and
counts the objects an earlier attempt created; a batch replayed after its settle finds no
claim and counts nothing. The registry holds only the claims of batches in flight.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from aggregation.deltas import NodeDelta
from aggregation.exact import ZERO, exact_sum

DELTA_PREFIX: Final = "deltas/"
METASTORE_PREFIX: Final = "metastore/"
REGISTRY_KEY: Final = f"{METASTORE_PREFIX}registry.json"

KEY_PREFIX_HEX_CHARACTERS: Final = 2
"""256 prefixes (``00``..``ff``), each taking an even 1/256 of the writes: S3 scales request
rates per prefix (about 3,500 writes/s each), so the archive's write ceiling grows to ~900k/s
before S3 has to split anything further. The batch hash is SHA-256, already uniform."""

DELTA_DOCUMENT_FORMAT: Final = "exactly-once-delta/1"
REGISTRY_SCHEMA_VERSION: Final = 1

_BATCH_HASH = re.compile(r"^[0-9a-f]{64}$")


class ArchiveDocumentError(ValueError):
    """An archived document does not have the shape this code writes."""


def delta_object_key(batch_hash: str) -> str:
    """``deltas/<hh>/<batch hash>.json``; refuses anything but a SHA-256 hex digest."""
    if not _BATCH_HASH.match(batch_hash):
        raise ArchiveDocumentError(f"batch hash {batch_hash!r} is not a lowercase SHA-256 hex digest")
    return f"{DELTA_PREFIX}{batch_hash[:KEY_PREFIX_HEX_CHARACTERS]}/{batch_hash}.json"


def batch_hash_of_key(key: str) -> str | None:
    """The batch hash a well-formed delta object key names, else None."""
    match = re.fullmatch(rf"{DELTA_PREFIX}([0-9a-f]{{{KEY_PREFIX_HEX_CHARACTERS}}})/([0-9a-f]{{64}})\.json", key)
    if match is None or not match.group(2).startswith(match.group(1)):
        return None
    return match.group(2)


# --- the delta object ---------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamPosition:
    """Where the delta item came from in the DeltaTable stream.

    Lambda's DynamoDB stream events carry no shard id, so the position is the stream ARN,
    the record's event id and its sequence number (unique within its shard).
    """

    event_source_arn: str
    event_id: str
    sequence_number: str


@dataclass(frozen=True)
class ArchivedDelta:
    """One DeltaTable item as archived: every attribute that decides the aggregates."""

    batch_hash: str
    deltas: Mapping[str, NodeDelta]
    record_count: int
    producer_timestamps: tuple[Decimal, ...]
    created_at: int
    stream: StreamPosition

    @property
    def key(self) -> str:
        return delta_object_key(self.batch_hash)


def _decimal_text(value: Decimal) -> str:
    """A decimal as JSON text that parses back to the identical Decimal (never a float)."""
    if not value.is_finite():
        raise ArchiveDocumentError(f"{value} is not a finite number")
    return str(value)


def delta_document(delta: ArchivedDelta) -> dict[str, Any]:
    """The JSON document of a delta object: numbers as decimal strings, counts as integers."""
    return {
        "Format": DELTA_DOCUMENT_FORMAT,
        "BatchHash": delta.batch_hash,
        "Deltas": {
            key: {"Value": _decimal_text(node.value), "TradeCount": node.trade_count}
            for key, node in sorted(delta.deltas.items())
        },
        "RecordCount": delta.record_count,
        "ProducerTimestamps": [_decimal_text(ts) for ts in delta.producer_timestamps],
        "CreatedAt": delta.created_at,
        "Stream": {
            "EventSourceARN": delta.stream.event_source_arn,
            "EventID": delta.stream.event_id,
            "SequenceNumber": delta.stream.sequence_number,
        },
    }


def encode_delta_document(delta: ArchivedDelta) -> bytes:
    """Canonical bytes (sorted keys, no spaces): a retry writes byte-identical content."""
    return json.dumps(delta_document(delta), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _reject_float(text: str) -> Decimal:
    raise ArchiveDocumentError(f"float literal {text} in an archived document: amounts are decimal strings")


def _parse_decimal(value: Any, what: str) -> Decimal:
    if not isinstance(value, str):
        raise ArchiveDocumentError(f"{what} must be a decimal string, got {value!r}")
    try:
        number = Decimal(value)
    except InvalidOperation:
        raise ArchiveDocumentError(f"{what} is not a decimal: {value!r}") from None
    if not number.is_finite():
        raise ArchiveDocumentError(f"{what} is not finite: {value!r}")
    return number


def _parse_int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ArchiveDocumentError(f"{what} must be an integer, got {value!r}")
    return value


def parse_delta_document(body: bytes) -> ArchivedDelta:
    """Read a delta object back, strictly: any deviation from what is written is an error."""
    try:
        document = json.loads(body.decode("utf-8"), parse_float=_reject_float)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ArchiveDocumentError(f"not a UTF-8 JSON document: {error}") from None
    if not isinstance(document, dict) or document.get("Format") != DELTA_DOCUMENT_FORMAT:
        raise ArchiveDocumentError(f"not a {DELTA_DOCUMENT_FORMAT} document")
    try:
        raw_deltas = document["Deltas"]
        stream = document["Stream"]
        if not isinstance(raw_deltas, dict) or not isinstance(stream, dict):
            raise ArchiveDocumentError("Deltas and Stream must be objects")
        deltas = {
            str(key): NodeDelta(
                _parse_decimal(node["Value"], f"Deltas.{key}.Value"),
                _parse_int(node["TradeCount"], f"Deltas.{key}.TradeCount"),
            )
            for key, node in raw_deltas.items()
        }
        delta = ArchivedDelta(
            batch_hash=str(document["BatchHash"]),
            deltas=deltas,
            record_count=_parse_int(document["RecordCount"], "RecordCount"),
            producer_timestamps=tuple(
                _parse_decimal(ts, "ProducerTimestamps[]") for ts in document["ProducerTimestamps"]
            ),
            created_at=_parse_int(document["CreatedAt"], "CreatedAt"),
            stream=StreamPosition(
                event_source_arn=str(stream["EventSourceARN"]),
                event_id=str(stream["EventID"]),
                sequence_number=str(stream["SequenceNumber"]),
            ),
        )
    except (KeyError, TypeError) as error:
        raise ArchiveDocumentError(f"missing or malformed field: {error}") from None
    delta_object_key(delta.batch_hash)  # validates the hash
    return delta


# --- totals from the archive -------------------------------------------------------------------


def archived_totals(deltas: Iterable[ArchivedDelta]) -> dict[str, NodeDelta]:
    """Every node's total over the archived deltas, exactly.

    Unlike `add_deltas`, a node whose total nets to zero is kept: the aggregate table keeps
    the item of a node every trade has left (at zero), and the comparison should see it.
    """
    totals: dict[str, NodeDelta] = {}
    for delta in deltas:
        for key, node in delta.deltas.items():
            current = totals.get(key, NodeDelta(ZERO, 0))
            totals[key] = NodeDelta(exact_sum(current.value, node.value), current.trade_count + node.trade_count)
    return totals


# --- the registry -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """An object an in-flight batch is about to write (or wrote) and has not counted yet."""

    owner: str  # the archive batch's identity (SHA-256 of its stream event ids)
    record_count: int


@dataclass(frozen=True)
class StreamProgress:
    """Per DeltaTable stream: how far the archive has got (for operators, not for counting).

    The highest sequence number settled; sequence numbers are ordered within a shard only, and
    Lambda does not tell a DynamoDB stream consumer its shard, so this is a progress gauge.
    """

    highest_sequence_number: str
    objects_archived: int


@dataclass(frozen=True)
class Registry:
    """``metastore/registry.json``."""

    objects_archived: int = 0
    state_changes_archived: int = 0  # sum of RecordCount over the archived delta items
    claims: Mapping[str, Claim] = field(default_factory=dict)  # batch hash -> claim
    streams: Mapping[str, StreamProgress] = field(default_factory=dict)  # stream ARN -> progress
    last_updated: str = ""
    schema_version: int = REGISTRY_SCHEMA_VERSION


def registry_document(registry: Registry) -> dict[str, Any]:
    return {
        "SchemaVersion": registry.schema_version,
        "ObjectsArchived": registry.objects_archived,
        "StateChangesArchived": registry.state_changes_archived,
        "Claims": {
            batch_hash: {"Owner": claim.owner, "RecordCount": claim.record_count}
            for batch_hash, claim in sorted(registry.claims.items())
        },
        "Streams": {
            arn: {
                "HighestSequenceNumber": progress.highest_sequence_number,
                "ObjectsArchived": progress.objects_archived,
            }
            for arn, progress in sorted(registry.streams.items())
        },
        "LastUpdated": registry.last_updated,
    }


def encode_registry(registry: Registry) -> bytes:
    return json.dumps(registry_document(registry), sort_keys=True, indent=1).encode()


def parse_registry(body: bytes) -> Registry:
    """Read the registry; a newer schema version is refused rather than half-understood."""
    try:
        document = json.loads(body.decode("utf-8"), parse_float=_reject_float)
        version = _parse_int(document["SchemaVersion"], "SchemaVersion")
        if version > REGISTRY_SCHEMA_VERSION:
            raise ArchiveDocumentError(f"registry schema {version} is newer than this code ({REGISTRY_SCHEMA_VERSION})")
        return Registry(
            objects_archived=_parse_int(document["ObjectsArchived"], "ObjectsArchived"),
            state_changes_archived=_parse_int(document["StateChangesArchived"], "StateChangesArchived"),
            claims={
                str(batch_hash): Claim(str(claim["Owner"]), _parse_int(claim["RecordCount"], "Claims[].RecordCount"))
                for batch_hash, claim in document["Claims"].items()
            },
            streams={
                str(arn): StreamProgress(
                    str(progress["HighestSequenceNumber"]),
                    _parse_int(progress["ObjectsArchived"], "Streams[].ObjectsArchived"),
                )
                for arn, progress in document["Streams"].items()
            },
            last_updated=str(document["LastUpdated"]),
            schema_version=version,
        )
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as error:
        raise ArchiveDocumentError(f"malformed registry: {error!r}") from None


@dataclass(frozen=True)
class ClaimOutcome:
    """The registry after claiming (None: nothing to write) and the claims found already there."""

    registry: Registry | None
    claimed_earlier: frozenset[str]  # batch hashes this owner had claimed in an earlier attempt


def claim_objects(registry: Registry, owner: str, deltas: Sequence[ArchivedDelta], now: str) -> ClaimOutcome:
    """Claim every delta of the batch before writing it (the write-ahead intent).

    A delta already claimed by this owner was claimed by an earlier attempt of the same batch;
    it is reported in `claimed_earlier`, because if its object exists now, that attempt created
    it and never counted it. A delta claimed by another owner is left to that owner.
    """
    claims = dict(registry.claims)
    earlier: set[str] = set()
    for delta in deltas:
        existing = claims.get(delta.batch_hash)
        if existing is None:
            claims[delta.batch_hash] = Claim(owner, delta.record_count)
        elif existing.owner == owner:
            earlier.add(delta.batch_hash)
    if len(claims) == len(registry.claims):
        return ClaimOutcome(None, frozenset(earlier))
    return ClaimOutcome(replace(registry, claims=claims, last_updated=now), frozenset(earlier))


def settle_objects(
    registry: Registry, owner: str, deltas: Sequence[ArchivedDelta], to_count: frozenset[str], now: str
) -> Registry | None:
    """Turn this owner's claims into counts: +1 object for each claimed delta in `to_count`.

    Only claims still held by `owner` are settled, and settling removes them, so applying the
    same settle twice (a redrive after a lost response, a replayed batch) counts nothing twice.
    None when there is nothing to change.
    """
    claims = dict(registry.claims)
    streams = dict(registry.streams)
    objects = registry.objects_archived
    state_changes = registry.state_changes_archived
    changed = False
    for delta in deltas:
        claim = claims.get(delta.batch_hash)
        if claim is None or claim.owner != owner:
            continue
        del claims[delta.batch_hash]
        changed = True
        if delta.batch_hash not in to_count:
            continue
        objects += 1
        state_changes += delta.record_count
        arn = delta.stream.event_source_arn
        progress = streams.get(arn, StreamProgress("0", 0))
        highest = max(int(progress.highest_sequence_number), int(delta.stream.sequence_number))
        streams[arn] = StreamProgress(str(highest), progress.objects_archived + 1)
    if not changed:
        return None
    return replace(
        registry,
        objects_archived=objects,
        state_changes_archived=state_changes,
        claims=claims,
        streams=streams,
        last_updated=now,
    )
