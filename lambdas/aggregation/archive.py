"""The audit archive's documents: the batch object, its receipt, and how a reader counts each item once.

Pure, like the rest of the domain: the archive function and the operator tools (`audit`) do the
S3 calls; what is written, and how what was written is counted, lives here.

Layout of the bucket:

* ``deltas/<hh>/<object id>.batch.json``, a **batch object**: every distinct delta item of one
  archive invocation, each as the document below, sorted by batch hash, in one canonical JSON
  document; created once with ``If-None-Match: *`` (and locked when `archiveObjectLockDays` is
  set). The object id (`batch_object_id`) is SHA-256 over the format name and the sorted batch
  hashes of its items: a function of *which* items it holds, not of their order, nor of who
  delivered them or when. ``<hh>``, its first two hex characters, spreads the keys over 256 prefixes.
* ``metastore/receipts/<hh>/<object id>.json``, the **registry**: one receipt per batch object,
  naming it and listing its items (batch hash -> ``RecordCount``); created once with
  ``If-None-Match: *``, always after its object exists.
* The per-item objects and the counting registry of earlier releases: read, never written
  (`aggregation.archive_legacy`).

An invocation makes two requests, whatever its size: PUT the batch object, then PUT its receipt.
A 412 on either means it already exists with the very same bytes (same items, so same key and
same canonical content), which is all the invocation needed; a 409 (a concurrent conditional
write of the same key in flight) is resent after a backoff (`archive_function.store`).

**Why each delta item counts exactly once: by construction, in the reader.** Not in the writer:
a retry whose batch holds other items than the attempt it retries (grown, shrunk, shifted; or a
second delivery racing the first) has another object id, so an item that attempt already wrote
(its object PUT succeeded before it died, before or after its receipt) is written again, under
the new key. Preventing that copy would take, before every write, knowing whether another
attempt, possibly still running, wrote or is about to write the item under some other key: a
claim per item in a shared structure that every delivery consults and settles, that is a
compare-and-swap per invocation on keys the items choose, and fencing for the attempts that
claim and die. The earlier layout did exactly that, per item, and it is what did not scale
(issue 37). So copies may exist, and readers count items, not copies:

* **at least once**: Lambda delivers a record until an invocation holding it succeeds, and an
  invocation succeeds only once a batch object with its items exists (created now, or found by the
  412 under the same key, which names the same items) and so does its receipt. Every item the
  stream delivered is therefore in some object that has a receipt;
* **at most once**: readers take the union of every object's items keyed by batch hash
  (`distinct_items`), the item's identity (its DeltaTable key, written once); every copy of an
  item must be byte-identical (one DeltaTable item is one stream record, whoever delivers it),
  and a copy that differs is a conflict readers report and `audit rebuild` refuses.

What a retry does, shape by shape: the same records again (a redelivery, a success delivered
again) or reordered: the same object id, 412, 412, nothing new; grown, shrunk or shifted after
an attempt that wrote nothing: one object, no copy; the same after an attempt that wrote its
object (a crash after the PUT, before or after the receipt): a second object, its copies
counted once; concurrent invocations: per key S3 lets one create it, the others get 412 (or 409,
resent). The ground truth never depends on which of these happened.

**The registry's job** is to be a record of what was written that does not live in the objects:
a receipt whose object is missing, or lists other items, is an object removed or altered; an
object without a receipt is the leftover of an attempt that died between its two writes and was
never delivered the same items again, harmless exactly when each of its items is also in an
object with a receipt (`audit reconcile` checks both). No key is written twice, so none is hot.

**Assumptions**: conditional writes are atomic and strongly consistent (S3's documented
behaviour; the emulator is corrected to match, docs/design.md); only the archive role writes
under ``deltas/`` and ``metastore/`` (the bucket policy); objects are kept (versioning, Object
Lock), so a removal is visible and recoverable.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from aggregation.deltas import NodeDelta
from aggregation.exact import ZERO, exact_sum
from aggregation.names import DELTA_PREFIX, RECEIPT_PREFIX
from aggregation.stream_images import ImageDecodingError, decode_number

KEY_PREFIX_HEX_CHARACTERS: Final = 2
"""256 prefixes (``00``..``ff``), each taking an even 1/256 of the writes: S3 scales request rates
per prefix (about 3,500 writes/s each). Object ids and batch hashes are SHA-256, already uniform."""

DELTA_DOCUMENT_FORMAT: Final = "exactly-once-delta/1"
BATCH_DOCUMENT_FORMAT: Final = "exactly-once-delta-batch/1"
RECEIPT_FORMAT: Final = "exactly-once-receipt/1"

_HASH = re.compile(r"^[0-9a-f]{64}$")
_HEX = f"[0-9a-f]{{{KEY_PREFIX_HEX_CHARACTERS}}}"
_BATCH_KEY = re.compile(rf"^{re.escape(DELTA_PREFIX)}({_HEX})/([0-9a-f]{{64}})\.batch\.json$")
_RECEIPT_KEY = re.compile(rf"^{re.escape(RECEIPT_PREFIX)}({_HEX})/([0-9a-f]{{64}})\.json$")


class ArchiveDocumentError(ValueError):
    """An archived document does not have the shape this code writes."""


def _require_hash(value: str, what: str) -> str:
    if not _HASH.match(value):
        raise ArchiveDocumentError(f"{what} {value!r} is not a lowercase SHA-256 hex digest")
    return value


# --- keys -----------------------------------------------------------------------------------------


def batch_object_id(batch_hashes: Iterable[str]) -> str:
    """The id of the batch object holding exactly these items: SHA-256 of the format name and the
    sorted distinct batch hashes, one a line. The same items give the same id in any order."""
    hashes = sorted({_require_hash(batch_hash, "batch hash") for batch_hash in batch_hashes})
    if not hashes:
        raise ArchiveDocumentError("a batch object holds at least one delta item")
    return hashlib.sha256("\n".join((BATCH_DOCUMENT_FORMAT, *hashes)).encode()).hexdigest()


def batch_object_key(object_id: str) -> str:
    """``deltas/<hh>/<object id>.batch.json``."""
    _require_hash(object_id, "object id")
    return f"{DELTA_PREFIX}{object_id[:KEY_PREFIX_HEX_CHARACTERS]}/{object_id}.batch.json"


def receipt_key(object_id: str) -> str:
    """``metastore/receipts/<hh>/<object id>.json``."""
    _require_hash(object_id, "object id")
    return f"{RECEIPT_PREFIX}{object_id[:KEY_PREFIX_HEX_CHARACTERS]}/{object_id}.json"


def _id_of(pattern: re.Pattern[str], key: str) -> str | None:
    match = pattern.match(key)
    if match is None or not match.group(2).startswith(match.group(1)):
        return None
    return match.group(2)


def object_id_of_batch_key(key: str) -> str | None:
    """The object id a well-formed batch object key names, else None."""
    return _id_of(_BATCH_KEY, key)


def object_id_of_receipt_key(key: str) -> str | None:
    """The object id a well-formed receipt key names, else None."""
    return _id_of(_RECEIPT_KEY, key)


# --- one delta item --------------------------------------------------------------------------------


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


def _decimal_text(value: Decimal) -> str:
    """A decimal as JSON text that parses back to the identical Decimal (never a float)."""
    if not value.is_finite():
        raise ArchiveDocumentError(f"{value} is not a finite number")
    return str(value)


def delta_document(delta: ArchivedDelta) -> dict[str, Any]:
    """One item's JSON document: numbers as decimal strings, counts as integers. The same
    document a per-item object of earlier releases held whole."""
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


def _canonical(document: Any) -> bytes:
    """Sorted keys, no spaces: the same document is always the same bytes."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def encode_delta_document(delta: ArchivedDelta) -> bytes:
    """One item's canonical bytes (what copies of an item are compared by)."""
    return _canonical(delta_document(delta))


def _reject_float(text: str) -> Decimal:
    raise ArchiveDocumentError(f"float literal {text} in an archived document: amounts are decimal strings")


def _load(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8"), parse_float=_reject_float)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ArchiveDocumentError(f"not a UTF-8 JSON document: {error}") from None


def _parse_decimal(value: Any, what: str) -> Decimal:
    """A decimal string, read exactly as a stream image's number is (`stream_images.decode_number`)."""
    try:
        return decode_number(value)
    except ImageDecodingError as error:
        raise ArchiveDocumentError(f"{what}: {error}") from None


def parse_int(value: Any, what: str) -> int:
    """An integer of a document (a bool is not one)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ArchiveDocumentError(f"{what} must be an integer, got {value!r}")
    return value


def delta_from_document(document: Any) -> ArchivedDelta:
    """One item's document read back, strictly: any deviation from what is written is an error."""
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
                parse_int(node["TradeCount"], f"Deltas.{key}.TradeCount"),
            )
            for key, node in raw_deltas.items()
        }
        delta = ArchivedDelta(
            batch_hash=str(document["BatchHash"]),
            deltas=deltas,
            record_count=parse_int(document["RecordCount"], "RecordCount"),
            producer_timestamps=tuple(
                _parse_decimal(ts, "ProducerTimestamps[]") for ts in document["ProducerTimestamps"]
            ),
            created_at=parse_int(document["CreatedAt"], "CreatedAt"),
            stream=StreamPosition(
                event_source_arn=str(stream["EventSourceARN"]),
                event_id=str(stream["EventID"]),
                sequence_number=str(stream["SequenceNumber"]),
            ),
        )
    except (KeyError, TypeError) as error:
        raise ArchiveDocumentError(f"missing or malformed field: {error}") from None
    _require_hash(delta.batch_hash, "BatchHash")
    return delta


def parse_delta_document(body: bytes) -> ArchivedDelta:
    """A per-item object's body (earlier releases), strictly."""
    return delta_from_document(_load(body))


# --- the batch object -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArchivedBatch:
    """One batch object: distinct delta items, sorted by batch hash (`batch_of` builds one)."""

    items: tuple[ArchivedDelta, ...]

    @property
    def object_id(self) -> str:
        return batch_object_id(item.batch_hash for item in self.items)

    @property
    def key(self) -> str:
        return batch_object_key(self.object_id)

    @property
    def receipt(self) -> Receipt:
        return Receipt(self.object_id, {item.batch_hash: item.record_count for item in self.items})


def batch_of(deltas: Iterable[ArchivedDelta]) -> ArchivedBatch:
    """The batch object of one delivery: each item once (a record delivered twice in one batch is
    one item), sorted by batch hash, so the same items in any order make the same bytes."""
    items: dict[str, ArchivedDelta] = {}
    for delta in deltas:
        seen = items.setdefault(delta.batch_hash, delta)
        if seen is not delta and encode_delta_document(seen) != encode_delta_document(delta):
            raise ArchiveDocumentError(f"two different delta items with batch hash {delta.batch_hash} in one batch")
    if not items:
        raise ArchiveDocumentError("a batch object holds at least one delta item")
    return ArchivedBatch(tuple(items[batch_hash] for batch_hash in sorted(items)))


def encode_batch_document(batch: ArchivedBatch) -> bytes:
    """The batch object's canonical bytes: a retry with the same items writes identical bytes."""
    return _canonical(
        {
            "Format": BATCH_DOCUMENT_FORMAT,
            "ObjectId": batch.object_id,
            "Items": [delta_document(item) for item in batch.items],
        }
    )


def parse_batch_document(body: bytes, object_id: str) -> ArchivedBatch:
    """The batch object stored under `object_id`'s key, strictly: its items sorted and distinct,
    and its id both the one its key names and the one its items make."""
    document = _load(body)
    if not isinstance(document, dict) or document.get("Format") != BATCH_DOCUMENT_FORMAT:
        raise ArchiveDocumentError(f"not a {BATCH_DOCUMENT_FORMAT} document")
    if set(document) != {"Format", "ObjectId", "Items"} or not isinstance(document["Items"], list):
        raise ArchiveDocumentError("a batch object has exactly Format, ObjectId and a list of Items")
    items = tuple(delta_from_document(item) for item in document["Items"])
    hashes = [item.batch_hash for item in items]
    if not items or hashes != sorted(set(hashes)):
        raise ArchiveDocumentError("a batch object's items are non-empty, sorted by batch hash and distinct")
    batch = ArchivedBatch(items)
    if document["ObjectId"] != object_id or batch.object_id != object_id:
        raise ArchiveDocumentError(f"ObjectId {document['ObjectId']!r} and the items' id differ from the key's")
    return batch


# --- the receipt (the registry) ------------------------------------------------------------------------


@dataclass(frozen=True)
class Receipt:
    """The registry's record of one batch object: which delta items it holds, and their state changes."""

    object_id: str
    items: Mapping[str, int]  # batch hash -> RecordCount

    @property
    def key(self) -> str:
        return receipt_key(self.object_id)

    @property
    def object_key(self) -> str:
        return batch_object_key(self.object_id)

    @property
    def state_changes(self) -> int:
        return sum(self.items.values())


def encode_receipt(receipt: Receipt) -> bytes:
    """A receipt's canonical bytes (the same whoever writes it)."""
    return _canonical(
        {
            "Format": RECEIPT_FORMAT,
            "ObjectId": receipt.object_id,
            "ObjectKey": receipt.object_key,
            "Items": dict(sorted(receipt.items.items())),
            "ItemCount": len(receipt.items),
            "StateChanges": receipt.state_changes,
        }
    )


def parse_receipt(body: bytes, object_id: str) -> Receipt:
    """The receipt stored under `object_id`'s key, strictly: its id, object key and totals its items'."""
    document = _load(body)
    if not isinstance(document, dict) or document.get("Format") != RECEIPT_FORMAT:
        raise ArchiveDocumentError(f"not a {RECEIPT_FORMAT} document")
    try:
        raw_items = document["Items"]
        if not isinstance(raw_items, dict):
            raise ArchiveDocumentError("Items must be an object")
        receipt = Receipt(
            object_id,
            {
                _require_hash(str(batch_hash), "batch hash"): parse_int(count, f"Items.{batch_hash}")
                for batch_hash, count in raw_items.items()
            },
        )
        if batch_object_id(receipt.items) != object_id or document["ObjectId"] != object_id:
            raise ArchiveDocumentError("the receipt's ObjectId and its items' id differ from its key's")
        if document["ObjectKey"] != receipt.object_key:
            raise ArchiveDocumentError(f"ObjectKey {document['ObjectKey']!r} is not {receipt.object_key}")
        if parse_int(document["ItemCount"], "ItemCount") != len(receipt.items) or (
            parse_int(document["StateChanges"], "StateChanges") != receipt.state_changes
        ):
            raise ArchiveDocumentError("ItemCount or StateChanges differ from the items'")
    except (KeyError, TypeError, AttributeError) as error:
        raise ArchiveDocumentError(f"missing or malformed field: {error!r}") from None
    return receipt


# --- counting ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DistinctItems:
    """Every archived delta item once (`distinct_items`), and the batch hashes whose copies differ."""

    items: Mapping[str, ArchivedDelta]
    copies: int
    conflicts: tuple[str, ...]

    @property
    def state_changes(self) -> int:
        return sum(item.record_count for item in self.items.values())


def distinct_items(copies: Iterable[ArchivedDelta]) -> DistinctItems:
    """The union of every copy of every item, keyed by batch hash: each item counts once however
    many objects hold it. A copy whose canonical bytes differ from the first is a conflict."""
    items: dict[str, ArchivedDelta] = {}
    first_bytes: dict[str, bytes] = {}
    conflicts: set[str] = set()
    seen = 0
    for copy in copies:
        seen += 1
        encoded = encode_delta_document(copy)
        if copy.batch_hash not in items:
            items[copy.batch_hash] = copy
            first_bytes[copy.batch_hash] = encoded
        elif first_bytes[copy.batch_hash] != encoded:
            conflicts.add(copy.batch_hash)
    return DistinctItems(dict(sorted(items.items())), seen, tuple(sorted(conflicts)))


def archived_totals(deltas: Iterable[ArchivedDelta]) -> dict[str, NodeDelta]:
    """Every node's total over `deltas` (give it distinct items), exactly.

    Unlike `add_deltas`, a node whose total nets to zero is kept: the aggregate table keeps
    the item of a node every trade has left (at zero), and the comparison should see it.
    """
    totals: dict[str, NodeDelta] = {}
    for delta in deltas:
        for key, node in delta.deltas.items():
            current = totals.get(key, NodeDelta(ZERO, 0))
            totals[key] = NodeDelta(exact_sum(current.value, node.value), current.trade_count + node.trade_count)
    return totals


@dataclass(frozen=True)
class RegistryFindings:
    """The batch objects against their receipts (`check_registry`); `ok` when nothing is amiss."""

    receipts: int
    missing_objects: tuple[str, ...]  # receipts whose object is not there: removed
    differing: tuple[str, ...]  # receipts listing other items than their object holds: altered
    unreceipted: tuple[str, ...]  # objects without a receipt: an attempt died between its two writes
    uncovered_items: tuple[str, ...]  # items only unreceipted objects hold

    @property
    def ok(self) -> bool:
        return not (self.missing_objects or self.differing or self.uncovered_items)


def check_registry(
    batches: Mapping[str, ArchivedBatch], receipts: Mapping[str, Receipt], recorded_elsewhere: Iterable[str] = ()
) -> RegistryFindings:
    """Every receipt's object there with exactly its items; every object without a receipt a harmless
    leftover: each of its items also in an object with a receipt (or in `recorded_elsewhere`, batch
    hashes the earlier releases' registry accounts for). Object ids are keys of both mappings."""
    missing = tuple(sorted(set(receipts) - set(batches)))
    differing = tuple(
        sorted(
            object_id
            for object_id, receipt in receipts.items()
            if object_id in batches and dict(receipt.items) != dict(batches[object_id].receipt.items)
        )
    )
    unreceipted = tuple(sorted(set(batches) - set(receipts)))
    covered = set(recorded_elsewhere)
    for object_id in set(batches) & set(receipts):
        covered.update(item.batch_hash for item in batches[object_id].items)
    uncovered = {item.batch_hash for object_id in unreceipted for item in batches[object_id].items} - covered
    return RegistryFindings(len(receipts), missing, differing, unreceipted, tuple(sorted(uncovered)))
