"""Planning the reduce stage's DynamoDB transactions.

A delta batch (one DeltaTable item) is applied as one or more *units*: the whole
batch, or slices of it when it touches more nodes than one transaction holds.
Each unit has a marker id; applying a unit writes its marker in the same
transaction (mode `crt+marker`), so a unit replayed at any later time finds its
marker and changes nothing. Units are packed, in stream order, into transactions
of at most 100 actions; each transaction's ClientRequestToken is derived from its
units' marker ids, so a retry inside DynamoDB's 10-minute token window is
recognised even without markers (mode `crt`).

Everything here is deterministic: the same pending units always give the same
plan, hence the same tokens.
"""

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from aggregation.deltas import NodeDelta, add_deltas

MAX_TRANSACTION_ACTIONS = 100
# One action of every transaction updates the `#stats` item, one writes a marker.
STATS_ACTIONS = 1
MARKER_ACTIONS_PER_UNIT = 1
MAX_NODES_PER_UNIT = MAX_TRANSACTION_ACTIONS - STATS_ACTIONS - MARKER_ACTIONS_PER_UNIT
CLIENT_REQUEST_TOKEN_LENGTH = 36


@dataclass(frozen=True)
class DeltaBatch:
    """One DeltaTable item: the net node deltas of one map batch."""

    batch_hash: str
    deltas: Mapping[str, NodeDelta]
    record_count: int
    producer_timestamps: tuple[Decimal, ...]


@dataclass(frozen=True)
class DeltaUnit:
    """The part of a delta batch that one marker guards."""

    marker_id: str
    deltas: tuple[tuple[str, NodeDelta], ...]
    record_count: int  # carried by the batch's first unit only, so it is counted once
    producer_timestamps: tuple[Decimal, ...]


@dataclass(frozen=True)
class PlannedTransaction:
    units: tuple[DeltaUnit, ...]
    node_deltas: Mapping[str, NodeDelta]  # summed over the units; one action per node
    record_count: int
    producer_timestamps: tuple[Decimal, ...]
    client_request_token: str

    @property
    def marker_ids(self) -> tuple[str, ...]:
        return tuple(unit.marker_id for unit in self.units)


def split_into_units(batch: DeltaBatch, max_nodes: int = MAX_NODES_PER_UNIT) -> list[DeltaUnit]:
    """Slice a delta batch into units of at most `max_nodes` nodes, by sorted key."""
    nodes = sorted(batch.deltas.items())
    slices = [nodes[start : start + max_nodes] for start in range(0, len(nodes), max_nodes)] or [[]]
    return [
        DeltaUnit(
            marker_id=f"{batch.batch_hash}/{index}",
            deltas=tuple(nodes_slice),
            record_count=batch.record_count if index == 0 else 0,
            producer_timestamps=batch.producer_timestamps if index == 0 else (),
        )
        for index, nodes_slice in enumerate(slices)
    ]


def client_request_token(marker_ids: Sequence[str]) -> str:
    """A ClientRequestToken (at most 36 characters) naming exactly these units."""
    digest = hashlib.sha256("\n".join(marker_ids).encode("utf-8")).hexdigest()
    return digest[:CLIENT_REQUEST_TOKEN_LENGTH]


def _action_count(node_keys: set[str], unit_count: int, with_markers: bool) -> int:
    markers = unit_count * MARKER_ACTIONS_PER_UNIT if with_markers else 0
    return len(node_keys) + markers + STATS_ACTIONS


def next_transaction(pending: Sequence[DeltaUnit], with_markers: bool) -> PlannedTransaction:
    """The transaction that applies the longest prefix of `pending` fitting in 100 actions."""
    if not pending:
        raise ValueError("nothing to plan")
    chosen: list[DeltaUnit] = []
    node_keys: set[str] = set()
    for unit in pending:
        keys = node_keys | {key for key, _ in unit.deltas}
        if chosen and _action_count(keys, len(chosen) + 1, with_markers) > MAX_TRANSACTION_ACTIONS:
            break
        chosen.append(unit)
        node_keys = keys
    node_deltas: dict[str, NodeDelta] = {}
    for unit in chosen:
        add_deltas(node_deltas, dict(unit.deltas))
    return PlannedTransaction(
        units=tuple(chosen),
        node_deltas=node_deltas,
        record_count=sum(unit.record_count for unit in chosen),
        producer_timestamps=tuple(ts for unit in chosen for ts in unit.producer_timestamps),
        client_request_token=client_request_token([unit.marker_id for unit in chosen]),
    )
