"""The archive layout of earlier releases, which `audit` still reads: one object per delta item and a
counting registry. Nothing writes it any more (`aggregation.archive` says what replaced it).

* ``deltas/<hh>/<batch hash>.json``: one delta item, the same document an item has inside a batch
  object (`aggregation.archive.delta_document`), its user metadata ``archive-claim`` naming the
  registry claim it was created under (``<shard>:<generation>``, or a bare ``<generation>`` for a
  claim of the single registry of the releases before the shards).
* ``metastore/registry/<k>.json`` and ``metastore/registry.json``: the registry shards (schema 2;
  the single registry may be schema 1 without open claims). Each counted the objects whose creator
  claim it closed (``ObjectsArchived``, ``StateChangesArchived``) and held the claims still open
  (``Claims``: batch hash -> the generation that opened it there).

**How a reader accounts for them exactly** (`account_for_legacy_objects`). Those releases counted an
object when its creator claim closed, and only then; a claim was closed by the settle of whoever
observed the object, or by a later invocation's sweep. After an upgrade nothing settles or sweeps
any more, so an invocation of the old code that died between its object write and its settle
leaves its claim open for good, and the object uncounted. The reader knows which: the object's
metadata names its creator claim, and the claim is open exactly when its shard still holds it
(``Claims[batch hash] == generation``). So the shards' counts must equal the objects whose creator
claim is closed, exactly; a claim left open whose object never appeared is an item the old code
never wrote, which the new layout must hold instead (`audit.reconcile` checks both).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from aggregation.archive import KEY_PREFIX_HEX_CHARACTERS, ArchivedDelta, ArchiveDocumentError, parse_int
from aggregation.names import DELTA_PREFIX, LEGACY_REGISTRY_KEY, REGISTRY_SHARD_PREFIX

REGISTRY_SCHEMA_VERSION: Final = 2
CLAIM_METADATA_KEY: Final = "archive-claim"
"""User metadata of a per-item object (``x-amz-meta-archive-claim``): the id of its creator claim."""

LEGACY_SHARD: Final = -1
"""The shard number of ``metastore/registry.json``, the single registry of the releases before the
shards; its claims' ids are a bare generation."""

MAX_REGISTRY_SHARDS: Final = 1024
"""The most registry shards those releases could be configured with (`archiveRegistryShards`)."""

_BATCH_HASH = re.compile(r"^[0-9a-f]{64}$")
_ITEM_KEY = re.compile(rf"^{re.escape(DELTA_PREFIX)}([0-9a-f]{{{KEY_PREFIX_HEX_CHARACTERS}}})/([0-9a-f]{{64}})\.json$")
_CLAIM_ID = re.compile(r"^(?:(0|[1-9][0-9]{0,3}):)?([1-9][0-9]{0,17})$")
_SHARD_KEY = re.compile(rf"^{re.escape(REGISTRY_SHARD_PREFIX)}(0|[1-9][0-9]{{0,3}})\.json$")


def item_object_key(batch_hash: str) -> str:
    """``deltas/<hh>/<batch hash>.json``, the key a per-item object had; refuses anything but a SHA-256 hex digest."""
    if not _BATCH_HASH.match(batch_hash):
        raise ArchiveDocumentError(f"batch hash {batch_hash!r} is not a lowercase SHA-256 hex digest")
    return f"{DELTA_PREFIX}{batch_hash[:KEY_PREFIX_HEX_CHARACTERS]}/{batch_hash}.json"


def batch_hash_of_item_key(key: str) -> str | None:
    """The batch hash a well-formed per-item object key names, else None."""
    match = _ITEM_KEY.match(key)
    if match is None or not match.group(2).startswith(match.group(1)):
        return None
    return match.group(2)


@dataclass(frozen=True, order=True)
class ClaimRef:
    """One claim of those releases: the registry shard that opened it and that shard's generation."""

    shard: int
    generation: int


def claim_metadata(claim: ClaimRef) -> dict[str, str]:
    """The metadata of a per-item object created under `claim` (what those releases wrote; tests build such buckets)."""
    generation = str(claim.generation)
    return {CLAIM_METADATA_KEY: generation if claim.shard == LEGACY_SHARD else f"{claim.shard}:{generation}"}


def creator_claim(metadata: Mapping[str, str]) -> ClaimRef | None:
    """The creator claim a per-item object's metadata names; None when it names none."""
    match = _CLAIM_ID.match(metadata.get(CLAIM_METADATA_KEY, ""))
    if match is None:
        return None
    shard = LEGACY_SHARD if match.group(1) is None else int(match.group(1))
    return ClaimRef(shard, int(match.group(2)))


def registry_key(shard: int) -> str:
    """The key of registry shard `shard` (`LEGACY_SHARD`: ``metastore/registry.json``)."""
    return LEGACY_REGISTRY_KEY if shard == LEGACY_SHARD else f"{REGISTRY_SHARD_PREFIX}{shard}.json"


def registry_shard_of_key(key: str) -> int | None:
    """The shard a registry key names (`LEGACY_SHARD` for the single registry); None: not a registry key."""
    if key == LEGACY_REGISTRY_KEY:
        return LEGACY_SHARD
    match = _SHARD_KEY.match(key)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class Registry:
    """One registry shard of those releases (only what a reader needs of it)."""

    objects_archived: int = 0
    state_changes_archived: int = 0
    claims: Mapping[str, int] = field(default_factory=dict)  # batch hash -> generation of its open claim here
    generation: int = 0
    schema_version: int = REGISTRY_SCHEMA_VERSION


def encode_registry(registry: Registry) -> bytes:
    """A shard as those releases wrote it (tests build such buckets with it)."""
    document: dict[str, Any] = {
        "SchemaVersion": registry.schema_version,
        "Generation": registry.generation,
        "ObjectsArchived": registry.objects_archived,
        "StateChangesArchived": registry.state_changes_archived,
        "Claims": dict(sorted(registry.claims.items())),
        "Streams": {},
        "LastUpdated": "",
    }
    return json.dumps(document, sort_keys=True, indent=1).encode()


def _reject_float(text: str) -> Any:
    raise ArchiveDocumentError(f"float literal {text} in a registry: counts are integers")


def parse_registry(body: bytes) -> Registry:
    """A registry shard of those releases; a newer schema, or schema 1 with open claims, is refused."""
    try:
        document = json.loads(body.decode("utf-8"), parse_float=_reject_float)
        version = parse_int(document["SchemaVersion"], "SchemaVersion")
        if version > REGISTRY_SCHEMA_VERSION:
            raise ArchiveDocumentError(f"registry schema {version} is newer than this code ({REGISTRY_SCHEMA_VERSION})")
        if version < REGISTRY_SCHEMA_VERSION and document["Claims"]:
            raise ArchiveDocumentError(f"registry schema {version} has open claims this code cannot account for")
        return Registry(
            objects_archived=parse_int(document["ObjectsArchived"], "ObjectsArchived"),
            state_changes_archived=parse_int(document["StateChangesArchived"], "StateChangesArchived"),
            claims={
                str(batch_hash): parse_int(claim_id, "Claims[]") for batch_hash, claim_id in document["Claims"].items()
            },
            generation=parse_int(document.get("Generation", 0), "Generation"),
            schema_version=version,
        )
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as error:
        raise ArchiveDocumentError(f"malformed registry: {error!r}") from None


@dataclass(frozen=True)
class ItemObject:
    """A per-item object as read: its delta item and the claim its metadata names (None: none)."""

    delta: ArchivedDelta
    creator_claim: ClaimRef | None


@dataclass(frozen=True)
class LegacyAccount:
    """What the earlier layout's registry and objects say together (`account_for_legacy_objects`)."""

    shards: int = 0
    registered_objects: int = 0  # the shards' ObjectsArchived, summed
    registered_state_changes: int = 0
    closed_objects: int = 0  # per-item objects whose creator claim is closed: what the shards must count
    closed_state_changes: int = 0
    uncounted_objects: int = 0  # per-item objects whose creator claim is still open (written, never settled)
    unclaimed_objects: int = 0  # per-item objects whose metadata names no claim: not written by the archive
    open_claims: frozenset[str] = frozenset()  # batch hashes with an open claim in any shard

    @property
    def exact(self) -> bool:
        """The shards count exactly the objects whose creator claim closed, and every object has a claim."""
        return (
            self.registered_objects == self.closed_objects
            and self.registered_state_changes == self.closed_state_changes
            and self.unclaimed_objects == 0
        )


def account_for_legacy_objects(registries: Mapping[int, Registry], objects: Sequence[ItemObject]) -> LegacyAccount:
    """The earlier layout's counts against its objects (module docstring): exact whatever claims were left open."""
    open_claims = {
        (ClaimRef(shard, generation), batch_hash)
        for shard, registry in registries.items()
        for batch_hash, generation in registry.claims.items()
    }
    claimed = [item for item in objects if item.creator_claim is not None]
    uncounted = [item for item in claimed if (item.creator_claim, item.delta.batch_hash) in open_claims]
    closed = [item for item in claimed if (item.creator_claim, item.delta.batch_hash) not in open_claims]
    return LegacyAccount(
        shards=len(registries),
        registered_objects=sum(registry.objects_archived for registry in registries.values()),
        registered_state_changes=sum(registry.state_changes_archived for registry in registries.values()),
        closed_objects=len(closed),
        closed_state_changes=sum(item.delta.record_count for item in closed),
        uncounted_objects=len(uncounted),
        unclaimed_objects=len(objects) - len(claimed),
        open_claims=frozenset(batch_hash for _claim, batch_hash in open_claims),
    )
