"""Planning the reduce stage's DynamoDB transactions.

Nodes are partitioned into `NODE_GROUPS` fixed *node groups* by a stable hash of
their aggregate key. A delta batch (one DeltaTable item) is applied as *units*:
its part of one node group, sliced further only when that part alone has more
nodes than one transaction holds. A unit is therefore a function of the batch and
the constants here alone, never of the batches delivered next to it, and so is its
marker id `<batch hash>/<group>of<NODE_GROUPS>/<slice>`: a replay in a different
batch boundary, or after DynamoDB's 10-minute token window, names the same units.

Applying a unit writes its marker in the same transaction (mode `crt+marker`), so
a unit replayed at any later time finds its marker and changes nothing; the rest
of its batch is applied. Transactions are planned per node group across every
pending batch: a group's units are summed into one update per node, so a node
(the root above all) is written once per invocation instead of once per delta
batch. Whole groups that fit together share a transaction; a group too large for
one transaction is packed greedily, in stream order. Each transaction's
ClientRequestToken is derived from its units' marker ids, so a retry inside the
token window is recognised even without markers (mode `crt`).

Each batch's record count and producer timestamps ride on its first unit only, so
`MessagesApplied` counts a batch exactly once however its units are spread over
transactions; a batch with no nodes still has that one (empty) unit.

Which slice of the totals a transaction writes (`aggregation.aggregate_items`) depends on
the mode (docs/design.md, "Aggregates and keys"):

- `crt+marker` (`with_markers`): every pending unit of the invocation is planned together,
  whatever delta item it came from, and each transaction writes the slice its token hashes
  to (`transaction_slice`). The token names the transaction's units (and, over more than one
  slice, the slice count: `client_request_token`), so the slice is a pure function of them: a
  retry in the same boundaries is the identical request; one in other boundaries is another
  transaction, and the markers make it add nothing twice. So an invocation's delta batches
  share their node updates however many slices and StateTable shards there are: reduce's
  writes per message do not grow with them.
- `crt` (the token alone): a unit adds to the slice of its delta item
  (`DeltaUnit.aggregate_slice`, `slice_of` its `StreamShard`) and each slice is planned
  apart, as every release before did: in `crt` a retry is recognised only as the identical
  transaction, so a retry straddling an upgrade must be formed as the old code formed it.

Everything here is deterministic: the same pending units (and slice count) always give
the same plan, hence the same tokens and requests.
"""

import functools
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from aggregation.aggregate_items import MAX_SLICES
from aggregation.deltas import NodeDelta, add_deltas
from aggregation.names import AGGREGATE_KEY, EXPIRES_AT, MARKER_PREFIX, marker_id

MAX_TRANSACTION_ACTIONS = 100
# One action of every transaction updates the `#stats` item, one writes a marker.
STATS_ACTIONS = 1
MARKER_ACTIONS_PER_UNIT = 1
MAX_NODES_PER_UNIT = MAX_TRANSACTION_ACTIONS - STATS_ACTIONS - MARKER_ACTIONS_PER_UNIT
CLIENT_REQUEST_TOKEN_LENGTH = 36
# Part of every marker id, hence of the idempotency contract: changing it renames
# every unit, so a batch applied under one value and replayed under another would be
# applied again. It is a constant, not a deployment setting, for that reason (and
# because `audit rebuild` must recreate exactly the markers the reduce stage writes).
# Two groups keep a reduce invocation of 10 delta batches over the standard
# hierarchy (~105 nodes) at about 53 nodes + 10 markers + #stats per transaction.
NODE_GROUPS = 2

DEFAULT_MARKER_TTL_DAYS = 7
"""How long a marker outlives its delta item's creation unless configured (`markerTtlDays`,
`MARKER_TTL_DAYS`, `audit rebuild --marker-ttl-days`): far beyond the 24-hour stream
retention, so no replay of the delta item outlives its markers."""

MIN_MARKER_TTL_DAYS = 2
"""The shortest marker TTL accepted: a unit replayed after its marker expired would be applied
twice, and a replay is possible for 24 hours after the delta item's stream record, which is
written a little after its `CreatedAt`: a whole day beyond that keeps the margin obvious."""


@dataclass(frozen=True)
class DeltaBatch:
    """What reduce applies of one DeltaTable item: the net node deltas of one map run."""

    batch_hash: str
    deltas: Mapping[str, NodeDelta]
    record_count: int
    producer_timestamps: tuple[Decimal, ...]
    created_at: int  # epoch seconds; markers expire relative to it, so a retry writes the same marker


@dataclass(frozen=True)
class DeltaUnit:
    """The part of a delta batch that one marker guards: one node group (or a part of it)."""

    marker_id: str
    node_group: int
    deltas: tuple[tuple[str, NodeDelta], ...]
    record_count: int  # carried by the batch's first unit only, so it is counted once
    producer_timestamps: tuple[Decimal, ...]
    created_at: int  # of its delta item
    aggregate_slice: int = 0
    """The slice of its delta item (`aggregation.aggregate_items.slice_of` its `StreamShard`): where it
    adds in mode `crt`; in `crt+marker` its transaction's token chooses (`transaction_slice`)."""

    @property
    def node_keys(self) -> frozenset[str]:
        return frozenset(key for key, _ in self.deltas)


@dataclass(frozen=True)
class PlannedTransaction:
    units: tuple[DeltaUnit, ...]
    node_deltas: Mapping[str, NodeDelta]  # summed over the units; one action per node
    record_count: int
    producer_timestamps: tuple[Decimal, ...]
    client_request_token: str
    aggregate_slice: int = 0
    """The one slice of its nodes and `#stats` it writes: `transaction_slice` of its token (`crt+marker`),
    or every unit's own (`crt`)."""

    @property
    def marker_ids(self) -> tuple[str, ...]:
        return tuple(unit.marker_id for unit in self.units)


def marker_expires_at(created_at: int, ttl_seconds: int) -> int:
    """When a unit's marker expires (epoch seconds, the AggregateTable's TTL): `ttl_seconds`
    after its delta item's `CreatedAt`.

    Never the clock: a retried transaction must carry identical parameters under its token,
    and `audit rebuild` recreates the very marker the reduce stage wrote.
    """
    return created_at + ttl_seconds


def marker_key(marker_id: str) -> dict[str, Any]:
    """A unit's marker's key in the AggregateTable (DynamoDB JSON)."""
    return {AGGREGATE_KEY: {"S": MARKER_PREFIX + marker_id}}


def marker_item(marker_id: str, expires_at: int) -> dict[str, Any]:
    """A unit's marker as the reduce stage puts it and `audit rebuild` recreates it (DynamoDB JSON)."""
    return marker_key(marker_id) | {EXPIRES_AT: {"N": str(expires_at)}}


NODE_GROUP_CACHE_ENTRIES = 16_384
"""Aggregate keys whose group a process remembers: every delta item names its nodes again, and
a hierarchy's nodes are few (about 105 in the standard one), so hashing each once per process
takes the hash off reduce's work per node (issue 37); bounded, whatever the hierarchy."""


@functools.lru_cache(maxsize=NODE_GROUP_CACHE_ENTRIES)
def node_group(aggregate_key: str, node_groups: int = NODE_GROUPS) -> int:
    """The node group of an aggregate key: SHA-256, so it never depends on the process or the batch."""
    digest = hashlib.sha256(aggregate_key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % node_groups


def split_into_units(
    batch: DeltaBatch,
    node_groups: int = NODE_GROUPS,
    max_nodes: int = MAX_NODES_PER_UNIT,
    aggregate_slice: int = 0,
) -> list[DeltaUnit]:
    """A batch's units: per node group, parts of at most `max_nodes` nodes by sorted key.

    Groups the batch does not touch have no unit; a batch touching no node at all
    gets one empty unit in group 0, so that its record count is still applied once.
    The marker ids do not depend on `aggregate_slice` (where the units add), only on the
    batch and its grouping.
    """
    nodes_by_group: dict[int, list[tuple[str, NodeDelta]]] = {}
    for key, delta in sorted(batch.deltas.items()):
        nodes_by_group.setdefault(node_group(key, node_groups), []).append((key, delta))
    parts: list[tuple[int, int, list[tuple[str, NodeDelta]]]] = [
        (group, start // max_nodes, nodes[start : start + max_nodes])
        for group, nodes in sorted(nodes_by_group.items())
        for start in range(0, len(nodes), max_nodes)
    ] or [(0, 0, [])]
    return [
        DeltaUnit(
            marker_id=marker_id(batch.batch_hash, group, node_groups, part),
            node_group=group,
            deltas=tuple(nodes_part),
            record_count=batch.record_count if position == 0 else 0,
            producer_timestamps=batch.producer_timestamps if position == 0 else (),
            created_at=batch.created_at,
            aggregate_slice=aggregate_slice,
        )
        for position, (group, part, nodes_part) in enumerate(parts)
    ]


def client_request_token(marker_ids: Sequence[str], slices: int = 1) -> str:
    """A ClientRequestToken (at most 36 characters) naming exactly these units, and in `crt+marker`
    over more than one slice the slice count too.

    Over one slice every release wrote slice 0, so a transaction of the same units is the same
    request whatever release or rule formed it, and keeps the token of the marker ids alone. Over
    several, where the transaction writes the slice its token names (`transaction_slice`), the
    count is named: a transaction that another slice count, or a release that sliced by delta item,
    formed of the same units wrote another slice, and reusing its token would be refused as a token
    reused with other parameters (for 10 minutes, should DynamoDB keep a cancelled one's), where a
    token of its own lets the markers decide at once.
    """
    text = "\n".join(marker_ids)
    if slices > 1:
        text = f"{slices} slices by token\n{text}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:CLIENT_REQUEST_TOKEN_LENGTH]


def transaction_slice(token: str, slices: int) -> int:
    """The slice a `crt+marker` transaction writes: its token's first 64 bits modulo `slices`.

    The token is a SHA-256 of the transaction's marker ids (and the slice count), so the slice is
    a pure function of its units (a retry of the same transaction writes the same items, as a
    token requires) and
    spreads the transactions of every reducer evenly over the slices, whichever delta items
    they pack: no item takes the whole rate, and an invocation never splits its batches by
    slice.
    """
    if not 1 <= slices <= MAX_SLICES:
        raise ValueError(f"slices must be between 1 and {MAX_SLICES}, got {slices}")
    return int(token[:16], 16) % slices


def _fits(node_keys: set[str], unit_count: int, with_markers: bool) -> bool:
    markers = unit_count * MARKER_ACTIONS_PER_UNIT if with_markers else 0
    return len(node_keys) + markers + STATS_ACTIONS <= MAX_TRANSACTION_ACTIONS


def _planned(units: Sequence[DeltaUnit], slices: int | None) -> PlannedTransaction:
    """One transaction of `units`: in the slice its token hashes to among `slices` (`crt+marker`),
    or, `slices` None, in its units' own slice (`crt`)."""
    node_deltas: dict[str, NodeDelta] = {}
    for unit in units:
        add_deltas(node_deltas, dict(unit.deltas))
    marker_ids = [unit.marker_id for unit in units]
    token = client_request_token(marker_ids) if slices is None else client_request_token(marker_ids, slices)
    return PlannedTransaction(
        units=tuple(units),
        node_deltas=node_deltas,
        record_count=sum(unit.record_count for unit in units),
        producer_timestamps=tuple(ts for unit in units for ts in unit.producer_timestamps),
        client_request_token=token,
        aggregate_slice=units[0].aggregate_slice if slices is None else transaction_slice(token, slices),
    )


def plan_transactions(pending: Sequence[DeltaUnit], with_markers: bool, slices: int = 1) -> list[PlannedTransaction]:
    """Every pending unit in transactions of at most 100 actions, grouped by node group.

    With markers (`crt+marker`) every unit is planned together and each transaction writes
    `transaction_slice` of its token among `slices` (module docstring). Without (`crt`) a
    transaction writes its units' own slice (`DeltaUnit.aggregate_slice`): slices are planned
    apart, in the order given, each as below, and `slices` is not used.
    """
    if with_markers:
        return [_planned(units, slices) for units in _pack(pending, with_markers)]
    units_by_slice: dict[int, list[DeltaUnit]] = {}
    for unit in pending:
        units_by_slice.setdefault(unit.aggregate_slice, []).append(unit)
    return [_planned(units, None) for same_slice in units_by_slice.values() for units in _pack(same_slice, False)]


def _pack(pending: Sequence[DeltaUnit], with_markers: bool) -> list[list[DeltaUnit]]:
    """Units planned together in transactions of at most 100 actions, grouped by node group.

    Groups are taken in order, each group's units in the order given (stream order).
    A whole group joins the open transaction when everything fits; otherwise the open
    transaction is closed and the group starts a new one, packed greedily unit by unit
    if it does not fit whole. A group's nodes belong to no other group, so a group
    inside one transaction is one update per node whatever the number of batches.
    """
    units_by_group: dict[int, list[DeltaUnit]] = {}
    for unit in pending:
        units_by_group.setdefault(unit.node_group, []).append(unit)
    planned: list[list[DeltaUnit]] = []
    open_units: list[DeltaUnit] = []
    open_nodes: set[str] = set()

    def close() -> None:
        nonlocal open_units, open_nodes
        if open_units:
            planned.append(open_units)
        open_units, open_nodes = [], set()

    for _, group_units in sorted(units_by_group.items()):
        group_nodes = set().union(*(unit.node_keys for unit in group_units))
        if not _fits(open_nodes | group_nodes, len(open_units) + len(group_units), with_markers):
            close()
        if _fits(open_nodes | group_nodes, len(open_units) + len(group_units), with_markers):
            open_units.extend(group_units)
            open_nodes |= group_nodes
            continue
        for unit in group_units:  # a group larger than one transaction
            if open_units and not _fits(open_nodes | unit.node_keys, len(open_units) + 1, with_markers):
                close()
            open_units.append(unit)
            open_nodes |= unit.node_keys
    close()
    return planned
