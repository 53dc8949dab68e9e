"""`reconcile`: recompute every aggregate node from the archive and compare exactly.

Run it on a drained pipeline (after `python -m producer verify` passes, or with the producer
stopped and the functions idle): the archive and the reduce stage consume the DeltaTable
stream independently, so while records are in flight either may be ahead of the other.

A node absent from one side compares as zero value and zero trades on that side: the table
keeps the item of a node every trade has left (at 0), a ledger does not list it at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from aggregation.archive import RegistryTotals, archived_totals
from aggregation.names import MESSAGES_APPLIED
from audit.aggregate_table import AggregateTableContents, read_aggregate_table
from audit.archive_reader import ArchiveContents, read_archive
from audit.targets import AuditTarget
from toolkit.ledger import ZERO_TOTALS, Totals, differing_keys, load_ledger


@dataclass(frozen=True)
class NodeDifference:
    """One node whose totals differ between the archive and another source."""

    key: str
    source: str  # "aggregate table" or "ledger"
    archive: Totals
    other: Totals


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class ReconcileReport:
    objects: int
    nodes: int
    checks: list[Check] = field(default_factory=list)
    differences: list[NodeDifference] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)


def compare_totals(archive: Mapping[str, Totals], other: Mapping[str, Totals], source: str) -> list[NodeDifference]:
    """Every node whose value or trade count differs, exactly (`toolkit.ledger`'s rule)."""
    return [
        NodeDifference(key, source, archive.get(key, ZERO_TOTALS), other.get(key, ZERO_TOTALS))
        for key in differing_keys(archive, other)
    ]


def open_claims_check(registry: RegistryTotals | None, archive: ArchiveContents) -> Check:
    """Open claims are harmless once their object exists; one without its object is an item missing.

    A claim stays open when the invocation that opened it died and its items are never
    delivered to the archive again (a re-delivery with other boundaries, or a duplicate
    delivery of an item already archived); a later invocation sweeps it after
    `archive_function.handler.SWEEP_AFTER_GENERATIONS` registry writes. If such a claim
    were the one its object was created under, that object would be uncounted, which the
    count check above catches; so once the counts agree, an open claim whose object exists
    is only a leftover of a delivery that died. One whose object does not exist is an item
    the archive lacks: in flight, or failing.
    """
    claims = set(registry.claims) if registry else set()
    archived = {delta.batch_hash for delta in archive.deltas}
    missing = claims - archived
    leftovers = len(claims & archived)
    if missing:
        return Check(
            "every open claim's object is archived",
            False,
            f"{len(missing)} without an object (a batch is in flight or failing), {leftovers} leftovers",
        )
    detail = "no open claims" if not leftovers else f"{leftovers} leftovers of deliveries that died (swept later)"
    return Check("every open claim's object is archived", True, detail)


def reconcile_contents(
    archive: ArchiveContents, table: AggregateTableContents, ledger: Mapping[str, Totals] | None = None
) -> ReconcileReport:
    """The comparisons, on contents already read (pure: the tests call it directly too)."""
    totals = archived_totals(archive.deltas)
    report = ReconcileReport(objects=len(archive.deltas), nodes=len(totals), unreadable=list(archive.unreadable))
    report.checks.append(
        Check(
            "every archived object is a valid delta",
            not archive.unreadable,
            f"{len(archive.unreadable)} unreadable" if archive.unreadable else f"{len(archive.deltas)} objects",
        )
    )
    table_differences = compare_totals(totals, table.nodes, "aggregate table")
    report.differences.extend(table_differences)
    report.checks.append(
        Check(
            "aggregate table = archive, node by node",
            not table_differences,
            f"{len(table_differences)} of {len(set(totals) | set(table.nodes))} nodes differ",
        )
    )
    applied = int(table.stats.get(MESSAGES_APPLIED, 0)) if table.stats else 0
    report.checks.append(
        Check(
            "#stats MessagesApplied = archived state changes",
            applied == archive.state_changes,
            f"{applied} applied, {archive.state_changes} archived",
        )
    )
    registry = archive.registry
    registered_objects = registry.objects_archived if registry else 0
    registered_changes = registry.state_changes_archived if registry else 0
    report.checks.append(
        Check(
            "registry counts every object exactly once",
            registered_objects == len(archive.deltas) and registered_changes == archive.state_changes,
            f"registry ({registry.shards if registry else 0} shards) {registered_objects} objects / "
            f"{registered_changes} state changes, "
            f"bucket {len(archive.deltas)} / {archive.state_changes}",
        )
    )
    report.checks.append(open_claims_check(registry, archive))
    if ledger is not None:
        ledger_differences = compare_totals(totals, ledger, "ledger")
        report.differences.extend(ledger_differences)
        report.checks.append(
            Check(
                "producer ledger = archive, node by node",
                not ledger_differences,
                f"{len(ledger_differences)} of {len(set(totals) | set(ledger))} nodes differ",
            )
        )
    return report


def reconcile(target: AuditTarget, ledger_path: Path | None = None) -> ReconcileReport:
    """Read the archive, the table and (optionally) the ledger, and compare."""
    ledger = load_ledger(ledger_path) if ledger_path is not None else None
    archive = read_archive(target.s3(), target.archive_bucket)
    table = read_aggregate_table(target.dynamodb(), target.aggregate_table)
    return reconcile_contents(archive, table, ledger)
