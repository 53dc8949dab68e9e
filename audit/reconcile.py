"""`reconcile`: recompute every aggregate node from the archive and compare exactly.

Run it on a drained pipeline (after `python -m producer verify` passes, or with the producer
stopped and the functions idle): the archive and the reduce stage consume the DeltaTable
stream independently, so while records are in flight either may be ahead of the other.

The archive's side is every delta item once, however many objects hold a copy of it
(`aggregation.archive`: counted once by construction); the registry (the receipts, and the
earlier releases' counting registry) is checked against the objects on its own.

A node absent from one side compares as zero value and zero trades on that side: the table
keeps the item of a node every trade has left (at 0), a ledger does not list it at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from aggregation.archive import archived_totals, check_registry
from aggregation.names import MESSAGES_APPLIED
from audit.aggregate_table import AggregateTableContents, read_aggregate_table
from audit.archive_reader import ArchiveContents, read_archive
from audit.targets import AuditTarget
from toolkit.ledger import ZERO_TOTALS, Totals, differing_keys, load_ledger

VALID = "every archived object is a valid document"
IDENTICAL_COPIES = "every copy of a delta item is identical"
TABLE = "aggregate table = archive, node by node"
MESSAGES = "#stats MessagesApplied = archived state changes"
RECEIPTS = "the registry's receipts = the batch objects"
LEGACY_COUNTS = "earlier releases' registry counts their per-item objects exactly once"
LEGACY_CLAIMS = "every open claim of the earlier registry has its item archived"
LEDGER = "producer ledger = archive, node by node"


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
    items: int
    nodes: int
    checks: list[Check] = field(default_factory=list)
    differences: list[NodeDifference] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    def failed(self) -> set[str]:
        return {check.name for check in self.checks if not check.ok}


def compare_totals(archive: Mapping[str, Totals], other: Mapping[str, Totals], source: str) -> list[NodeDifference]:
    """Every node whose value or trade count differs, exactly (`toolkit.ledger`'s rule)."""
    return [
        NodeDifference(key, source, archive.get(key, ZERO_TOTALS), other.get(key, ZERO_TOTALS))
        for key in differing_keys(archive, other)
    ]


def receipts_check(archive: ArchiveContents) -> Check:
    """Each receipt's object there with exactly its items; objects without one only as covered leftovers."""
    findings = check_registry(
        archive.batches, archive.receipts, (item.delta.batch_hash for item in archive.item_objects)
    )
    problems = [
        f"{count} {what}"
        for count, what in (
            (len(findings.missing_objects), "receipt(s) name an object that is missing"),
            (len(findings.differing), "receipt(s) list other items than their object"),
            (len(findings.uncovered_items), "item(s) only in objects without a receipt"),
        )
        if count
    ]
    leftovers = (
        f", {len(findings.unreceipted)} object(s) without a receipt whose items are recorded elsewhere "
        "(an attempt died between its two writes)"
        if findings.unreceipted and not findings.uncovered_items
        else ""
    )
    detail = "; ".join(problems) or (f"{findings.receipts} receipts, {len(archive.batches)} batch objects{leftovers}")
    return Check(RECEIPTS, findings.ok, detail)


def legacy_checks(archive: ArchiveContents) -> list[Check]:
    """The earlier layout: its registry's counts against its objects, and its open claims' items."""
    account = archive.legacy
    counts = Check(
        LEGACY_COUNTS,
        account.exact,
        f"registry ({account.shards} shards) {account.registered_objects} objects / "
        f"{account.registered_state_changes} state changes, per-item objects whose claim closed "
        f"{account.closed_objects} / {account.closed_state_changes}"
        + (f"; {account.uncounted_objects} written under a claim never closed" if account.uncounted_objects else "")
        + (f"; {account.unclaimed_objects} name no claim" if account.unclaimed_objects else ""),
    )
    missing = sorted(account.open_claims - set(archive.items.items))
    claims = Check(
        LEGACY_CLAIMS,
        not missing,
        f"{len(missing)} open claim(s) whose item is in no object (first: {missing[0]})"
        if missing
        else f"{len(account.open_claims)} open claims, each item archived",
    )
    return [counts, claims]


def reconcile_contents(
    archive: ArchiveContents, table: AggregateTableContents, ledger: Mapping[str, Totals] | None = None
) -> ReconcileReport:
    """The comparisons, on contents already read (pure: the tests call it directly too)."""
    items = archive.items
    totals = archived_totals(items.items.values())
    report = ReconcileReport(
        objects=archive.objects, items=len(items.items), nodes=len(totals), unreadable=list(archive.unreadable)
    )
    report.checks.append(
        Check(
            VALID,
            not archive.unreadable,
            f"{len(archive.unreadable)} unreadable"
            if archive.unreadable
            else f"{len(archive.batches)} batch objects, {len(archive.receipts)} receipts, "
            f"{len(archive.item_objects)} per-item objects, {len(archive.registries)} registry shards",
        )
    )
    report.checks.append(
        Check(
            IDENTICAL_COPIES,
            not items.conflicts,
            f"{len(items.conflicts)} item(s) with differing copies (first: {items.conflicts[0]})"
            if items.conflicts
            else f"{items.copies} copies of {len(items.items)} items",
        )
    )
    table_differences = compare_totals(totals, table.nodes, "aggregate table")
    report.differences.extend(table_differences)
    report.checks.append(
        Check(
            TABLE,
            not table_differences,
            f"{len(table_differences)} of {len(set(totals) | set(table.nodes))} nodes differ",
        )
    )
    applied = int(table.stats.get(MESSAGES_APPLIED, 0)) if table.stats else 0
    report.checks.append(
        Check(MESSAGES, applied == items.state_changes, f"{applied} applied, {items.state_changes} archived")
    )
    report.checks.append(receipts_check(archive))
    report.checks.extend(legacy_checks(archive))
    if ledger is not None:
        ledger_differences = compare_totals(totals, ledger, "ledger")
        report.differences.extend(ledger_differences)
        report.checks.append(
            Check(
                LEDGER,
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
