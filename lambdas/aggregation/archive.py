"""The audit archive's documents: object keys, the delta object, the registry and its merges.

Pure, like the rest of the domain: the archive function and the operator tools (`audit`)
do the S3 calls; everything that decides *what* is written, and whether a write may count,
lives here so it can be tested without S3.

Layout of the bucket:

* ``deltas/<first 2 hex characters of the batch hash>/<batch hash>.json``: one immutable
  object per DeltaTable item, written once with ``If-None-Match: *``, its user metadata
  ``archive-claim`` naming the registry claim it was created under.
* ``metastore/registry/<k>.json``, ``k`` in ``0..archiveRegistryShards-1``: the registry
  shards, which together say what has been archived; each updated by compare-and-swap
  (``If-Match: <ETag read>``) and created with ``If-None-Match: *``. An invocation claims in
  one shard (`registry_shard_for`), so invocations on different shards never contend.
  ``metastore/registry.json``, the single registry of earlier releases, is read as one more
  shard (`LEGACY_SHARD`) that nothing claims in any more. Readers sum the shards with
  `registry_totals`, and only with it.

**Why the registry counts every object exactly once.** S3's conditional write lets each key
be created once; the registry must count each creation once although an attempt can die
between its object writes and its registry update, a PUT whose response was lost is resent
by the SDK and comes back 412 although it created the object, and a retried stream batch
need not have the same boundaries (nor be the only delivery of its items). So the count is
tied to the *object*, never to a batch:

1. **claim** (`claim_objects`): before an object is written, its batch hash holds an open
   claim in the invocation's registry shard: the one found there, whoever opened it, or a
   new one. A new claim's id (`ClaimRef`) is the shard and the shard's generation whose
   write opens it; every committed version of a shard has a generation of its own
   (compare-and-swap), so no two claims share an id. A key may hold an open claim in
   several shards (a retry whose other boundaries chose another shard): each is a claim
   like any other, and only the one the object names can count.
2. **write**: the object is PUT with ``If-None-Match: *`` and the claim id in its metadata.
   S3 writes the metadata atomically with the object, so every object names, for ever, the
   claim it was created under. On 412 the writer reads that metadata (HeadObject): the
   object is *observed* with its creator claim, be it created by this PUT's own first
   attempt (a lost response), by an earlier attempt or long ago.
3. **settle** (`settle_objects`, routed by `settle_routes`): for each object observed to
   exist, whoever observed it closes the open claim of its key in its own shard *and* in the
   shard its creator claim is in, and the object counts where the closed claim is the one
   its metadata names.

At most once: an object counts only when its creator claim closes, which happens once (the
settle that closes it commits by compare-and-swap on the creator's shard; a re-applied
settle finds it gone; no other claim has its id). Every other claim of that key, opened
before or after it, in any shard, closes without counting. At least once: the creator claim
was open when the object was created (claims precede writes, closes follow observations)
and stays open until an observer closes it, and the first successful invocation holding any
batch with the item does observe it and settles in the creator's shard, whichever shard it
claimed in itself; Lambda redelivers an item until a batch containing it succeeds, whatever
its boundaries. So with no claim open, the shards' ``ObjectsArchived`` sum to the number of
objects.

**Bounded.** Claims are open only for items in flight. The only claims nobody settles for
their own batch are those of an invocation whose items are never delivered again (a
duplicate delivery of an archived batch that dies): `stale_claims` lets later invocations
close those too, by reading the objects (counting any they created). A claim whose object
never appears stays open: an item the archive is missing, which ``audit reconcile`` reports.

**Assumptions**, all documented by S3 or kept by this project: conditional writes are
atomic and strongly consistent, metadata is written with its object, reads after writes are
strongly consistent; delta objects are never deleted (no DeleteObject grant, versioning);
no registry shard is ever deleted or rolled back (its generation would repeat claim ids):
restore its latest version instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Final

from aggregation.deltas import NodeDelta
from aggregation.exact import ZERO, exact_sum
from aggregation.names import DELTA_PREFIX, LEGACY_REGISTRY_KEY, REGISTRY_SHARD_PREFIX
from aggregation.stream_images import ImageDecodingError, decode_number

KEY_PREFIX_HEX_CHARACTERS: Final = 2
"""256 prefixes (``00``..``ff``), each taking an even 1/256 of the writes: S3 scales request
rates per prefix (about 3,500 writes/s each), so the archive's write ceiling grows to ~900k/s
before S3 has to split anything further. The batch hash is SHA-256, already uniform."""

DELTA_DOCUMENT_FORMAT: Final = "exactly-once-delta/1"
REGISTRY_SCHEMA_VERSION: Final = 2

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
    """A decimal string, read exactly as a stream image's number is (`stream_images.decode_number`)."""
    try:
        return decode_number(value)
    except ImageDecodingError as error:
        raise ArchiveDocumentError(f"{what}: {error}") from None


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

CLAIM_METADATA_KEY: Final = "archive-claim"
"""User metadata of a delta object (``x-amz-meta-archive-claim``): the id of its creator claim,
``<shard>:<generation>`` (a bare ``<generation>``: a claim of the legacy single registry)."""

LEGACY_SHARD: Final = -1
"""`ClaimRef.shard` of ``metastore/registry.json``, the one registry of earlier releases: its
objects' metadata names a bare generation, which the previous release also reads (so an object
written by this release never counts in the previous one's registry during a rolling deploy:
its metadata names no claim there)."""

MAX_REGISTRY_SHARDS: Final = 1024
"""`archiveRegistryShards`' ceiling: far beyond any plan's need; readers read every shard."""

_CLAIM_ID = re.compile(r"^(?:(0|[1-9][0-9]{0,3}):)?([1-9][0-9]{0,17})$")
_SHARD_KEY = re.compile(rf"^{re.escape(REGISTRY_SHARD_PREFIX)}(0|[1-9][0-9]{{0,3}})\.json$")


@dataclass(frozen=True, order=True)
class ClaimRef:
    """One claim, unique for ever: the registry shard that opened it and that shard's generation."""

    shard: int
    generation: int


def registry_key(shard: int) -> str:
    """The object key of registry shard `shard` (`LEGACY_SHARD`: ``metastore/registry.json``)."""
    return LEGACY_REGISTRY_KEY if shard == LEGACY_SHARD else f"{REGISTRY_SHARD_PREFIX}{shard}.json"


def registry_shard_of_key(key: str) -> int | None:
    """The shard a registry object key names (`LEGACY_SHARD` for the legacy key); None: not a registry key."""
    if key == LEGACY_REGISTRY_KEY:
        return LEGACY_SHARD
    match = _SHARD_KEY.match(key)
    return int(match.group(1)) if match else None


def registry_shard_for(batch_hashes: Iterable[str], shards: int) -> int:
    """The shard an invocation with these items claims in: a pure function of the batch's content.

    Its smallest batch hash (SHA-256, uniform) modulo `shards`: invocations spread evenly over
    the shards, and a retry of the same batch claims where its first attempt did (so it finds
    that attempt's claims). A retry with other boundaries may choose another shard; that costs
    one more registry update (settling in the creator's shard), never a wrong count.
    """
    if shards < 1:
        raise ValueError(f"registry shards must be at least 1, got {shards}")
    return int(min(batch_hashes), 16) % shards


def claim_metadata(claim: ClaimRef) -> dict[str, str]:
    """The object metadata naming `claim` as the creator claim."""
    generation = str(claim.generation)
    return {CLAIM_METADATA_KEY: generation if claim.shard == LEGACY_SHARD else f"{claim.shard}:{generation}"}


def creator_claim(metadata: Mapping[str, str]) -> ClaimRef | None:
    """The creator claim an object's metadata names; None when it names none (written otherwise)."""
    match = _CLAIM_ID.match(metadata.get(CLAIM_METADATA_KEY, ""))
    if match is None:
        return None
    shard = LEGACY_SHARD if match.group(1) is None else int(match.group(1))
    return ClaimRef(shard, int(match.group(2)))


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
    """One registry shard, ``metastore/registry/<k>.json`` (or the legacy ``metastore/registry.json``).

    `generation` also makes every version's bytes, hence its ETag, unique: an ``If-Match``
    on a stale read can never match a later version that happens to hold the same content.
    """

    objects_archived: int = 0
    state_changes_archived: int = 0  # sum of RecordCount over the archived delta items
    claims: Mapping[str, int] = field(default_factory=dict)  # batch hash -> generation of its open claim here
    streams: Mapping[str, StreamProgress] = field(default_factory=dict)  # stream ARN -> progress
    generation: int = 0  # committed writes so far: each version's own number, and new claims' id
    last_updated: str = ""
    schema_version: int = REGISTRY_SCHEMA_VERSION


def registry_document(registry: Registry) -> dict[str, Any]:
    return {
        "SchemaVersion": registry.schema_version,
        "Generation": registry.generation,
        "ObjectsArchived": registry.objects_archived,
        "StateChangesArchived": registry.state_changes_archived,
        "Claims": dict(sorted(registry.claims.items())),
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
    """Read the registry; a newer schema version is refused rather than half-understood.

    Schema 1 (claims owned by batch identities) is read only when it holds no open claim: its
    claims cannot be settled by this code. Upgrade with the archive drained.
    """
    try:
        document = json.loads(body.decode("utf-8"), parse_float=_reject_float)
        version = _parse_int(document["SchemaVersion"], "SchemaVersion")
        if version > REGISTRY_SCHEMA_VERSION:
            raise ArchiveDocumentError(f"registry schema {version} is newer than this code ({REGISTRY_SCHEMA_VERSION})")
        if version < REGISTRY_SCHEMA_VERSION and document["Claims"]:
            raise ArchiveDocumentError(
                f"registry schema {version} has open claims: drain the archive with the previous version first"
            )
        return Registry(
            objects_archived=_parse_int(document["ObjectsArchived"], "ObjectsArchived"),
            state_changes_archived=_parse_int(document["StateChangesArchived"], "StateChangesArchived"),
            claims={
                str(batch_hash): _parse_int(claim_id, "Claims[]") for batch_hash, claim_id in document["Claims"].items()
            },
            streams={
                str(arn): StreamProgress(
                    str(progress["HighestSequenceNumber"]),
                    _parse_int(progress["ObjectsArchived"], "Streams[].ObjectsArchived"),
                )
                for arn, progress in document["Streams"].items()
            },
            generation=_parse_int(document.get("Generation", 0), "Generation"),
            last_updated=str(document["LastUpdated"]),
        )
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as error:
        raise ArchiveDocumentError(f"malformed registry: {error!r}") from None


def claim_objects(registry: Registry, batch_hashes: Iterable[str], now: str) -> Registry | None:
    """Open a claim for every hash that has none (the write-ahead intent); None: all are open.

    An open claim is kept whoever opened it: the object may have been created under it by an
    attempt that died, or by one that is still running, and it must count when it closes.
    """
    missing = [batch_hash for batch_hash in dict.fromkeys(batch_hashes) if batch_hash not in registry.claims]
    if not missing:
        return None
    generation = registry.generation + 1
    claims = {**registry.claims, **dict.fromkeys(missing, generation)}
    return replace(registry, claims=claims, generation=generation, last_updated=now)


@dataclass(frozen=True)
class ObservedObject:
    """A delta object seen to exist, and the claim its metadata names (None: no claim)."""

    delta: ArchivedDelta
    creator_claim: ClaimRef | None


def settle_routes(own_shard: int, observed: Iterable[ObservedObject]) -> dict[int, list[ObservedObject]]:
    """Which shards an invocation settles which observed objects in: all in `own_shard` (where
    it holds or swept their claims), and each also in its creator claim's shard when that is
    another (so the creator claim closes, and counts, as soon as anyone observes the object)."""
    routes: dict[int, list[ObservedObject]] = {own_shard: []}
    for seen in observed:
        routes[own_shard].append(seen)
        creator = seen.creator_claim
        if creator is not None and creator.shard != own_shard:
            routes.setdefault(creator.shard, []).append(seen)
    return routes


def settle_objects(registry: Registry, shard: int, observed: Iterable[ObservedObject], now: str) -> Registry | None:
    """Close shard `shard`'s open claim of every observed object: +1 object where it is the creator claim.

    Closing removes the claim, so applying the same settle twice (a redrive after our own
    write's response was lost, a replayed batch) counts nothing twice. None when no observed
    object has an open claim here.
    """
    claims = dict(registry.claims)
    streams = dict(registry.streams)
    objects = registry.objects_archived
    state_changes = registry.state_changes_archived
    changed = False
    for seen in observed:
        delta = seen.delta
        claim_id = claims.pop(delta.batch_hash, None)
        if claim_id is None:
            continue
        changed = True
        if ClaimRef(shard, claim_id) != seen.creator_claim:
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
        generation=registry.generation + 1,
        last_updated=now,
    )


def stale_claims(registry: Registry, excluded: Iterable[str], after_generations: int) -> list[str]:
    """Batch hashes whose claim has stayed open for `after_generations` registry writes or more.

    Any invocation may close them (`settle_objects`, once their objects are observed): the
    close counts exactly as its owner's would. The lag only spares the objects of batches
    still in flight a useless read.
    """
    skip = set(excluded)
    return sorted(
        batch_hash
        for batch_hash, claim_id in registry.claims.items()
        if batch_hash not in skip and registry.generation - claim_id >= after_generations
    )


# --- the shards together --------------------------------------------------------------------------


@dataclass(frozen=True)
class RegistryTotals:
    """What all registry shards say together (`registry_totals`): what every reader shows."""

    shards: int = 0
    objects_archived: int = 0
    state_changes_archived: int = 0
    claims: frozenset[str] = frozenset()  # batch hashes with an open claim in any shard
    open_claims: int = 0  # open claims over all shards (a key may hold one in several)


def registry_totals(shards: Iterable[Registry]) -> RegistryTotals:
    """The registry as one: counts summed over the shards (the legacy one included), claims pooled.

    Sums are exact because the shards count disjoint objects: an object counts only in the
    shard of its creator claim, and only once there.
    """
    totals = RegistryTotals()
    for registry in shards:
        totals = RegistryTotals(
            shards=totals.shards + 1,
            objects_archived=totals.objects_archived + registry.objects_archived,
            state_changes_archived=totals.state_changes_archived + registry.state_changes_archived,
            claims=totals.claims | frozenset(registry.claims),
            open_claims=totals.open_claims + len(registry.claims),
        )
    return totals
