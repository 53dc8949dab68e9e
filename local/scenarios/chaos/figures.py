"""What one run measured, from real counters: the runner's, the emulator's, the verifier's, the quarantine's."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from aggregation.names import (
    CONFLICT_REASON_PREFIX,
    QUARANTINE_BINARY_PAYLOAD,
    QUARANTINE_PAYLOAD_TRUNCATED,
    QUARANTINE_REASON,
)
from local.emulator.injected_faults import CANCELLED_TOKEN_KEPT, LOST_RESPONSE, STATEMENT_COUNTER_SUFFIX, THROTTLE
from local.scenarios.chaos.settings import S3_WRITE_SITES, STAGES, WRITE_SITES
from producer.ledger import LedgerCounts
from producer.sender import SendSummary
from producer.verifier import NodeMismatch, TradeMismatch, VerificationReport
from toolkit.pipeline import PipelineTarget

READ_OPERATIONS = frozenset({"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems", "GetRecords"})
READ_OPERATIONS_ALSO = frozenset({"GetShardIterator"})


# ----------------------------------------------------- lost and double-counted


@dataclass(frozen=True)
class Discrepancies:
    """How far the aggregates are from the ledger, split into what is missing and what is extra.

    Per node: missing = expected - actual where positive, double-counted = actual - expected
    where positive, in value and in trade count; summed over nodes. A value over-count of a
    negative amount shows as missing value: both must be zero for the totals to be exact.
    """

    nodes_compared: int = 0
    nodes_wrong: int = 0
    value_missing: Decimal = Decimal(0)
    value_double_counted: Decimal = Decimal(0)
    trades_missing_from_nodes: int = 0
    trades_double_counted_in_nodes: int = 0
    trades_missing: int = 0
    """Trades absent from the state table."""
    trades_at_wrong_version: int = 0
    """Trades stored with another version than the ledger's final one."""
    trades_with_other_content: int = 0
    """Trades stored at the ledger's final version with another value or hierarchy (a conflicting
    duplicate applied in place of the version it conflicts with)."""

    @property
    def lost(self) -> bool:
        return bool(self.value_missing or self.trades_missing_from_nodes or self.trades_missing)

    @property
    def double_counted(self) -> bool:
        return bool(self.value_double_counted or self.trades_double_counted_in_nodes)

    @property
    def exact(self) -> bool:
        return not (
            self.lost
            or self.double_counted
            or self.trades_at_wrong_version
            or self.trades_with_other_content
            or self.nodes_wrong
        )


def discrepancies(
    mismatches: Iterable[NodeMismatch], trade_mismatches: Iterable[TradeMismatch], nodes_compared: int = 0
) -> Discrepancies:
    """Sum the verifier's node and trade mismatches into missing and double-counted amounts."""
    value_missing = value_extra = Decimal(0)
    count_missing = count_extra = nodes_wrong = 0
    for mismatch in mismatches:
        nodes_wrong += 1
        value, count = mismatch.value_difference, mismatch.count_difference
        value_extra += max(value, Decimal(0))
        value_missing += max(-value, Decimal(0))
        count_extra += max(count, 0)
        count_missing += max(-count, 0)
    problems = [mismatch.problem for mismatch in trade_mismatches]
    return Discrepancies(
        nodes_compared=nodes_compared,
        nodes_wrong=nodes_wrong,
        value_missing=value_missing,
        value_double_counted=value_extra,
        trades_missing_from_nodes=count_missing,
        trades_double_counted_in_nodes=count_extra,
        trades_missing=problems.count("missing"),
        trades_at_wrong_version=problems.count("wrong version"),
        trades_with_other_content=len(problems) - problems.count("missing") - problems.count("wrong version"),
    )


def report_discrepancies(report: VerificationReport) -> Discrepancies:
    comparison = report.aggregates
    return discrepancies(
        comparison.mismatches, report.trade_mismatches, max(comparison.expected_nodes, comparison.actual_nodes)
    )


# ------------------------------------------------------------- counters


FUNCTION_COUNTERS = ("invocations", "errors", "retries", "timeouts", "records_processed", "again_after_success")


def add_function_counters(total: dict[str, dict[str, Any]], stats: Mapping[str, Any] | None) -> None:
    """Add one runner life's per-function counters (`runner-stats.json`) into `total`.

    A restarted runner starts its counters at zero, so each life is added once, from its last
    snapshot (written every second: a kill may lose the last second's counts, never add any).
    """
    for name, counters in (stats or {}).get("functions", {}).items():
        into = total.setdefault(name, {key: 0 for key in FUNCTION_COUNTERS} | {"injected": {}})
        for key in FUNCTION_COUNTERS:
            into[key] += int(counters.get(key, 0))
        into["peak_in_flight"] = max(int(into.get("peak_in_flight", 0)), int(counters.get("peak_in_flight", 0)))
        for point, count in counters.get("injected_failures", {}).items():
            into["injected"][point] = into["injected"].get(point, 0) + int(count)
        reshaped = into.setdefault("reshaped", {})
        for shape, count in counters.get("reshaped_retries", {}).items():
            reshaped[shape] = reshaped.get(shape, 0) + int(count)


def peak_invocations(functions: Mapping[str, Mapping[str, Any]], stage: str) -> int:
    """The most invocations of `stage`'s function that ran at once, over every runner life."""
    return max((int(c.get("peak_in_flight", 0)) for name, c in functions.items() if stage_of(name) == stage), default=0)


def stage_of(function_name: str) -> str | None:
    """`ExactlyOnceAggregation-StateFunction…` -> `state` (the physical names embed the stage)."""
    lowered = function_name.lower()
    return next((stage for stage in STAGES if stage in lowered), None)


def emulator_fault_figures(report: Mapping[str, Any]) -> dict[str, int]:
    """`GET /_compat/faults` counters as figure rows: lost responses per write site, throttles by side,
    single statements of the state function's batches whose answers were lost or which were refused."""
    injected = report.get("injected", {})
    figures: dict[str, int] = {}
    lost = injected.get(LOST_RESPONSE, {})
    for stage, operation, _table, variant in WRITE_SITES:
        figures[f"lost response, {stage} {operation} ({variant})"] = int(lost.get(f"dynamodb:{operation}", 0))
    for stage, operation, _bucket, variant in S3_WRITE_SITES:
        figures[f"lost response, {stage} {operation} ({variant})"] = int(lost.get(f"s3:{operation}", 0))
    figures[LOST_STATEMENTS_FIGURE] = int(lost.get(f"dynamodb:BatchExecuteStatement{STATEMENT_COUNTER_SUFFIX}", 0))
    reads = writes = statements = 0
    for key, count in injected.get(THROTTLE, {}).items():
        operation = key.partition(":")[2]
        if operation.endswith(STATEMENT_COUNTER_SUFFIX):
            statements += int(count)
        elif operation in READ_OPERATIONS or operation in READ_OPERATIONS_ALSO:
            reads += int(count)
        else:
            writes += int(count)
    figures["throttled reads (DynamoDB, Streams, Kinesis)"] = reads
    figures["throttled writes (DynamoDB, Kinesis)"] = writes
    figures[THROTTLED_STATEMENTS_FIGURE] = statements
    kept = injected.get(CANCELLED_TOKEN_KEPT, {})
    figures[KEPT_TOKENS_FIGURE] = int(kept.get("dynamodb:TransactWriteItems", 0))
    return figures


KEPT_TOKENS_FIGURE = "cancelled reduce transactions whose token stayed taken"
THROTTLED_STATEMENTS_FIGURE = "throttled state statements (one by one, the rest of the batch applied)"
LOST_STATEMENTS_FIGURE = "lost response, state statements one by one (applied, answered InternalServerError)"


@dataclass(frozen=True)
class QuarantineFigures:
    records: int = 0
    conflicting_duplicates: int = 0
    truncated: int = 0
    stored_as_binary: int = 0


def count_quarantine(target: PipelineTarget) -> QuarantineFigures:
    """Scan the quarantine table: every record with its reason (conflicts are reported there too)."""
    client = target.dynamodb()
    records = conflicts = truncated = binary = 0
    for page in client.get_paginator("scan").paginate(
        TableName=target.quarantine,
        ProjectionExpression=f"#r, {QUARANTINE_PAYLOAD_TRUNCATED}, {QUARANTINE_BINARY_PAYLOAD}",
        ExpressionAttributeNames={"#r": QUARANTINE_REASON},
    ):
        for item in page.get("Items", []):
            records += 1
            conflicts += item.get(QUARANTINE_REASON, {}).get("S", "").startswith(CONFLICT_REASON_PREFIX)
            truncated += bool(item.get(QUARANTINE_PAYLOAD_TRUNCATED, {}).get("BOOL"))
            binary += QUARANTINE_BINARY_PAYLOAD in item
    return QuarantineFigures(records, conflicts, truncated, binary)


@dataclass
class RunFigures:
    """Everything one run measured, for the figures table."""

    label: str
    reduce_mode: str
    sent: SendSummary | None = None
    functions: dict[str, dict[str, Any]] = field(default_factory=dict)
    emulator_faults: dict[str, int] = field(default_factory=dict)
    runner_restarts: int = 0
    killed_mid_batch: int = 0
    workers_killed: dict[str, int] = field(default_factory=dict)
    """Stage -> function workers SIGKILLed inside an invocation (the runner starts a new one)."""
    quarantine: QuarantineFigures = field(default_factory=QuarantineFigures)
    discrepancies: Discrepancies = field(default_factory=Discrepancies)
    verified_exact: bool = False
    reconcile_exit_code: int | None = None
    reconcile_report: str = ""
    """What `audit reconcile` printed: shown when the chaos run's archive disagrees."""
    elapsed_seconds: float = 0.0
    transaction_conflicts: int = 0
    """Reduce transactions the emulator cancelled because another reducer was writing one of their items."""
    iam: dict[str, Any] = field(default_factory=dict)
    """The emulator's IAM check (`local.emulator.control.iam_report`): requests of the functions'
    roles checked against their policies, and the calls denied (none, when the grants suffice)."""

    @property
    def iam_enforced_and_sufficient(self) -> bool:
        """The functions ran as their roles with IAM enforced, and no call of theirs was denied."""
        return self.iam.get("mode") == "enforce" and self.iam.get("requests_checked", 0) > 0 and not self.iam["denied"]

    @property
    def counts(self) -> LedgerCounts:
        return self.sent.counts if self.sent else LedgerCounts()


def records_processed(functions: Mapping[str, Mapping[str, Any]], stage: str | None = None) -> int:
    """Records the functions of `stage` (every stage: None) completed, replays after a failure or a kill included."""
    return sum(int(c.get("records_processed", 0)) for name, c in functions.items() if stage in (None, stage_of(name)))
