"""The dashboard's model: what one look at the pipeline shows, shared by every view.

One :class:`SnapshotBuilder` turns successive reads of the AggregateTable into
:class:`Snapshot` objects: the hierarchy as a tree, totals, throughput and
latency derived from successive ``#stats`` samples, and the verification
against the producer's ledger. Nothing here talks to AWS or draws anything, so
it is tested with plain values and reused unchanged by the web page and the
terminal view.

Aggregate values stay :class:`~decimal.Decimal` from the table to the
formatted string; sums run in :data:`EXACT_ARITHMETIC`, which raises instead of
rounding.
"""

from __future__ import annotations

import decimal
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Literal

from aggregation.hierarchy import KEY_SEPARATOR
from frontend.formatting import format_count, format_decimal
from toolkit.ledger import ZERO_TOTALS, LedgerMessages, NodeTotals, differing_keys, node_keys
from toolkit.liveness import Liveness

#: DynamoDB numbers span 38 significant digits between 1E-130 and 1E+126, so an
#: exact sum of any of them needs a few hundred digits. ``Inexact`` is trapped:
#: a sum that would round raises rather than showing a wrong total.
EXACT_ARITHMETIC = decimal.Context(
    prec=400,
    Emax=999_999,
    Emin=-999_999,
    traps=[decimal.Inexact, decimal.InvalidOperation, decimal.Overflow, decimal.DivisionByZero],
)


@dataclass(frozen=True)
class StatsRecord:
    """The ``#stats`` item as last written by the reduce stage.

    Latency is from the producer's message ``Timestamp`` to the reduce
    transaction, mean and max over the last transaction only; the history
    below turns successive records into figures over a time window.
    """

    messages_applied: int
    last_updated: float | None
    latency_mean_seconds: float | None
    latency_max_seconds: float | None


@dataclass(frozen=True)
class TableReading:
    """One read of the AggregateTable: every hierarchy node and the ``#stats`` item (if written yet)."""

    nodes: Mapping[str, NodeTotals]
    stats: StatsRecord | None


class TableReadError(Exception):
    """The table could not be read; the message is shown to the user as is."""


@dataclass(frozen=True)
class TreeNode:
    """One node of the hierarchy tree as displayed.

    ``totals`` is None for a parent that has no item of its own: the reduce
    stage writes every level in one transaction, so this only shows when a
    scan saw a table that is being changed or cleared.
    """

    key: str
    name: str
    depth: int
    totals: NodeTotals | None
    children: tuple[TreeNode, ...]


def build_tree(nodes: Mapping[str, NodeTotals]) -> tuple[TreeNode, ...]:
    """The hierarchy rooted at the top level, children sorted by name.

    Keys are the level values joined by ``:`` (``Delta:FXSpot:AMER``); the
    parent of a key is the key without its last level. Every key is a node: the
    table reader has already left the bookkeeping items out
    (``aggregation.aggregate_items``), so a level value such as ``#1 desk`` shows.
    """
    children_of: dict[str, set[str]] = {"": set()}
    for key in nodes:
        child = key
        while True:
            parent, separator, _ = child.rpartition(KEY_SEPARATOR)
            parent = parent if separator else ""
            siblings = children_of.setdefault(parent, set())
            if child in siblings:
                break
            siblings.add(child)
            if not parent:
                break
            child = parent

    def subtree(key: str, depth: int) -> TreeNode:
        return TreeNode(
            key=key,
            name=key.rpartition(KEY_SEPARATOR)[2],
            depth=depth,
            totals=nodes.get(key),
            children=tuple(subtree(child, depth + 1) for child in sorted(children_of.get(key, ()))),
        )

    return tuple(subtree(key, 0) for key in sorted(children_of[""]))


def walk(nodes: tuple[TreeNode, ...]) -> Iterator[TreeNode]:
    """Every node of the tree, parents before their children (the order every view lists them)."""
    for node in nodes:
        yield node
        yield from walk(node.children)


def sum_totals(totals: Iterable[NodeTotals | None]) -> NodeTotals:
    """The exact sum of several nodes (missing ones count as zero)."""
    value = Decimal(0)
    trade_count = 0
    with decimal.localcontext(EXACT_ARITHMETIC):
        for item in totals:
            if item is not None:
                value += item.value
                trade_count += item.trade_count
    return NodeTotals(value, trade_count)


# --------------------------------------------------------------------------- throughput and latency


@dataclass(frozen=True)
class ChartPoint:
    """One sample on the throughput/latency chart.

    The latency figures are set only on samples where the reduce stage had
    written a new ``#stats`` since the previous sample, so the chart shows
    observations rather than a stale value repeated while the pipeline idles.
    """

    observed_at: float
    applied_per_second: float | None
    latency_mean_seconds: float | None
    latency_max_seconds: float | None


@dataclass(frozen=True)
class LatencySummary:
    """End-to-end latency over the window: the mean weighted by messages applied, and the max."""

    window_seconds: float
    mean_seconds: float | None
    max_seconds: float | None
    observations: int


@dataclass
class _Observation:
    last_updated: float
    mean_seconds: float | None
    max_seconds: float | None
    weight: int


@dataclass
class StatsHistory:
    """Successive ``#stats`` samples, from which the rates and windows are computed.

    ``#stats`` holds a running count and the latency of the last transaction
    only, so throughput is the count's growth between samples taken
    ``rate_window_seconds`` apart, and latency over the last minute is the set
    of distinct transactions seen in that minute (each weighted by the messages
    it added, so a busy batch counts for more than an idle one).
    """

    rate_window_seconds: float = 5.0
    latency_window_seconds: float = 60.0
    chart_seconds: float = 300.0
    _samples: deque[tuple[float, int]] = field(default_factory=deque)
    _observations: deque[_Observation] = field(default_factory=deque)
    _chart: deque[ChartPoint] = field(default_factory=deque)
    _previous: StatsRecord | None = None

    def record(self, observed_at: float, stats: StatsRecord | None) -> None:
        """Adds one sample read at ``observed_at`` (epoch seconds)."""
        previous = self._previous
        if stats is not None and previous is not None and stats.messages_applied < previous.messages_applied:
            # The count went backwards: the tables were cleared. Start over.
            self._samples.clear()
            self._observations.clear()
            previous = None
        new_observation: _Observation | None = None
        if stats is not None:
            self._samples.append((observed_at, stats.messages_applied))
            if previous is None or (stats.last_updated, stats.messages_applied) != (
                previous.last_updated,
                previous.messages_applied,
            ):
                added = stats.messages_applied - previous.messages_applied if previous else 0
                new_observation = _Observation(
                    last_updated=stats.last_updated if stats.last_updated is not None else observed_at,
                    mean_seconds=stats.latency_mean_seconds,
                    max_seconds=stats.latency_max_seconds,
                    weight=max(added, 1),
                )
                self._observations.append(new_observation)
            self._previous = stats
        self._trim(observed_at)
        self._chart.append(
            ChartPoint(
                observed_at=observed_at,
                applied_per_second=self.applied_per_second(),
                latency_mean_seconds=new_observation.mean_seconds if new_observation else None,
                latency_max_seconds=new_observation.max_seconds if new_observation else None,
            )
        )

    def _trim(self, now: float) -> None:
        while len(self._samples) > 2 and self._samples[1][0] <= now - self.rate_window_seconds:
            self._samples.popleft()
        while self._observations and self._observations[0].last_updated < now - self.latency_window_seconds:
            self._observations.popleft()
        while self._chart and self._chart[0].observed_at < now - self.chart_seconds:
            self._chart.popleft()

    def applied_per_second(self) -> float | None:
        """Messages applied per second over the last ``rate_window_seconds`` (None before two samples)."""
        if len(self._samples) < 2:
            return None
        (first_at, first_count), (last_at, last_count) = self._samples[0], self._samples[-1]
        if last_at <= first_at:
            return None
        return (last_count - first_count) / (last_at - first_at)

    def latency(self, now: float) -> LatencySummary:
        """Latency over the transactions the reduce stage committed in the last ``latency_window_seconds``."""
        recent = [o for o in self._observations if o.last_updated >= now - self.latency_window_seconds]
        weighted = [(o.mean_seconds, o.weight) for o in recent if o.mean_seconds is not None]
        maxima = [o.max_seconds for o in recent if o.max_seconds is not None]
        total_weight = sum(weight for _, weight in weighted)
        return LatencySummary(
            window_seconds=self.latency_window_seconds,
            mean_seconds=sum(mean * weight for mean, weight in weighted) / total_weight if weighted else None,
            max_seconds=max(maxima) if maxima else None,
            observations=len(recent),
        )

    def chart(self) -> tuple[ChartPoint, ...]:
        """The samples of the last ``chart_seconds``, oldest first."""
        return tuple(self._chart)


# --------------------------------------------------------------------------- verification

VerificationStatus = Literal["exact", "draining", "differs", "stopped", "no-ledger", "ledger-error"]
"""``stopped``: the totals differ from the ledger and the pipeline is not running (`toolkit.liveness`),
so the difference is work waiting, not a wrong total."""

#: The pipeline counts as idle once ``MessagesApplied`` has not moved for this long; only
#: then is a difference from the ledger a failure rather than work still in flight.
IDLE_AFTER_SECONDS = 10.0


@dataclass(frozen=True)
class LedgerState:
    """What the producer's ledger says the aggregates must be (``nodes``), or why that is unknown;
    ``messages`` is what it says about the messages sent (None for a ledger without counts)."""

    path: str | None
    nodes: Mapping[str, NodeTotals] | None
    error: str | None = None
    messages: LedgerMessages | None = None


@dataclass(frozen=True)
class NodeDifference:
    """A node whose table totals differ from the ledger's."""

    key: str
    expected: NodeTotals
    actual: NodeTotals

    @property
    def value_difference(self) -> Decimal:
        """Table minus ledger, exactly."""
        with decimal.localcontext(EXACT_ARITHMETIC):
            return self.actual.value - self.expected.value


@dataclass(frozen=True)
class Verification:
    """The comparison of the table with the ledger, as the badge shows it."""

    status: VerificationStatus
    ledger_path: str | None
    compared_nodes: int
    differences: tuple[NodeDifference, ...]
    total_absolute_difference: Decimal
    detail: str | None = None
    progress: tuple[int, int] | None = None
    """While draining: (messages applied, messages the ledger expects applied), when both are known."""

    @property
    def label(self) -> str:
        """The badge text, identical in every view."""
        if self.status == "exact":
            return f"exact · {format_count(self.compared_nodes)} nodes match the ledger"
        if self.status == "draining":
            if self.progress is not None:
                applied, to_apply = self.progress
                return f"draining: {format_count(applied)} of {format_count(to_apply)} applied"
            matching = self.compared_nodes - len(self.differences)
            return f"draining: {format_count(matching)} of {format_count(self.compared_nodes)} nodes match"
        if self.status == "differs":
            count = len(self.differences)
            nodes = "node differs" if count == 1 else "nodes differ"
            return f"{format_count(count)} {nodes} · Σ|Δ| = {format_decimal(self.total_absolute_difference)}"
        if self.status == "stopped":
            matching = self.compared_nodes - len(self.differences)
            return (
                f"the pipeline is not running ({self.detail}): {format_count(matching)} of "
                f"{format_count(self.compared_nodes)} nodes match so far"
            )
        if self.status == "no-ledger":
            return "no ledger"
        return f"ledger unreadable: {self.detail}"


def verify(
    actual: Mapping[str, NodeTotals],
    ledger: LedgerState,
    *,
    idle: bool = True,
    messages_applied: int | None = None,
    liveness: Callable[[], Liveness] | None = None,
) -> Verification:
    """Compares every node in the table or the ledger; a node missing on one side counts as zero.

    A node the table holds at zero value and zero trades (every trade moved
    away) equals a ledger without it. The total absolute difference is the sum
    over differing nodes of |table value - ledger value|, exact. While the
    pipeline is not ``idle`` a difference is work in flight (``draining``), not a
    failure: the reader is told how far it got instead. When the totals differ, ``liveness``
    (asked only then) tells a stopped pipeline from a wrong one: ``stopped``, never ``differs``.
    """
    if ledger.nodes is None:
        unknown: VerificationStatus = "ledger-error" if ledger.error else "no-ledger"
        return Verification(unknown, ledger.path, 0, (), Decimal(0), ledger.error)
    differences = tuple(
        NodeDifference(key, ledger.nodes.get(key, ZERO_TOTALS), actual.get(key, ZERO_TOTALS))
        for key in differing_keys(ledger.nodes, actual)
    )
    with decimal.localcontext(EXACT_ARITHMETIC):
        total = sum((abs(d.value_difference) for d in differences), Decimal(0))
    status: VerificationStatus = "exact" if not differences else "differs" if idle else "draining"
    detail = None
    if differences and liveness is not None:
        answer = liveness()
        if answer.running is False:
            status, detail = "stopped", answer.reason
    progress = None
    to_apply = ledger.messages.to_apply if ledger.messages is not None else None
    if status == "draining" and to_apply is not None and messages_applied is not None and messages_applied <= to_apply:
        progress = (messages_applied, to_apply)
    return Verification(
        status=status,
        ledger_path=ledger.path,
        compared_nodes=len(node_keys(actual, ledger.nodes)),
        differences=differences,
        total_absolute_difference=total,
        detail=detail,
        progress=progress,
    )


# --------------------------------------------------------------------------- backlog and quarantine


@dataclass(frozen=True)
class Backlog:
    """Messages in vs messages applied: how far behind the pipeline is.

    ``sent`` and ``to_apply`` come from the producer's ledger (None without one);
    ``applied`` from ``#stats``. ``behind`` is what is still to apply, ``idle``
    whether the applied count has stood still for :data:`IDLE_AFTER_SECONDS`, and
    ``last_applied_at`` when it last moved.

    The two sides count alike from a fresh runtime (`make up` starts the tables and
    the ledger together). `producer clear` starts a new ledger while ``#stats`` keeps
    counting (its deletions are state changes too), so once ``applied`` exceeds
    ``to_apply`` the difference means nothing and ``behind`` is unknown (None).

    The two sides do not count quite the same thing: ``to_apply`` is every message that changes
    a trade, while ``MessagesApplied`` counts the state changes written, and the state function
    writes only the highest version of a trade that a batch holds (`aggregation.batches`): a new
    trade and its modification in one batch are one write. So ``to_apply`` is an upper bound.
    Once the table matches the ledger exactly (``exact``) nothing is in flight: ``behind`` is 0
    and the rest, ``superseded``, is the versions a later one replaced in the same batch.
    """

    sent: int | None
    to_apply: int | None
    applied: int
    idle: bool
    last_applied_at: float | None
    exact: bool = False

    @property
    def behind(self) -> int | None:
        """Messages the ledger expects applied that are not yet; None when not comparable,
        0 once the table matches the ledger (whatever the counts say: ``superseded``)."""
        if self.to_apply is None or self.applied > self.to_apply:
            return None
        if self.exact:
            return 0
        return self.to_apply - self.applied

    @property
    def superseded(self) -> int | None:
        """Once exact: the messages that changed a trade but were never written on their own,
        a later version of the trade in the same state batch having replaced them."""
        if not self.exact or self.to_apply is None or self.applied > self.to_apply:
            return None
        return self.to_apply - self.applied


@dataclass(frozen=True)
class QuarantinedRecord:
    """One QuarantineTable item as shown: why, and when (epoch seconds, None if not recorded)."""

    record_id: str
    reason: str
    quarantined_at: float | None


@dataclass(frozen=True)
class QuarantineSummary:
    """How many records the pipeline quarantined, and the latest few (newest first)."""

    count: int
    latest: tuple[QuarantinedRecord, ...]


# --------------------------------------------------------------------------- the snapshot


@dataclass(frozen=True)
class Snapshot:
    """Everything one refresh of a view shows."""

    table_name: str
    generated_at: float
    tree: tuple[TreeNode, ...]
    grand_total: NodeTotals
    node_count: int
    stats: StatsRecord | None
    applied_per_second: float | None
    latency: LatencySummary
    chart: tuple[ChartPoint, ...]
    verification: Verification
    read_error: str | None
    last_read_at: float | None
    backlog: Backlog | None = None
    quarantine: QuarantineSummary | None = None
    quarantine_error: str | None = None


class SnapshotBuilder:
    """Builds successive snapshots; keeps the sample history between them.

    A failed read does not lose the picture: the snapshot keeps the last good
    reading and carries ``read_error`` so the views can say the data is stale.
    """

    def __init__(
        self,
        table_name: str | Callable[[], str],
        read_table: Callable[[], TableReading],
        read_ledger: Callable[[], LedgerState] | None = None,
        *,
        read_quarantine: Callable[[], QuarantineSummary | None] | None = None,
        liveness: Callable[[], Liveness] | None = None,
        clock: Callable[[], float] = time.time,
        history: StatsHistory | None = None,
    ) -> None:
        self._table_name = table_name
        self._read_table = read_table
        self._read_ledger = read_ledger
        self._read_quarantine = read_quarantine
        self._liveness = liveness
        self._clock = clock
        self._history = history if history is not None else StatsHistory()
        self._reading = TableReading({}, None)
        self._last_read_at: float | None = None
        self._started_at: float | None = None
        self._applied: int | None = None
        self._applied_changed_at: float | None = None
        self._quarantine: QuarantineSummary | None = None

    def _note_applied(self, now: float, stats: StatsRecord | None) -> float:
        """When the applied count last moved: seen moving by us, or the reduce stage's own
        ``LastUpdated``, whichever is later (without ``LastUpdated``, the dashboard's start)."""
        applied = stats.messages_applied if stats else 0
        if self._started_at is None:
            self._started_at = now
        if self._applied is not None and applied != self._applied:
            self._applied_changed_at = now
        self._applied = applied
        written = stats.last_updated if stats else None
        moments = [self._applied_changed_at, written if written is not None else self._started_at]
        return max(moment for moment in moments if moment is not None)

    def _backlog(self, now: float, ledger: LedgerState) -> Backlog:
        stats = self._reading.stats
        last_moved = self._note_applied(now, stats)
        applied = stats.messages_applied if stats else 0
        messages = ledger.messages
        return Backlog(
            sent=messages.sent if messages else None,
            to_apply=messages.to_apply if messages else None,
            applied=applied,
            idle=now - last_moved >= IDLE_AFTER_SECONDS,
            last_applied_at=stats.last_updated if stats else None,
        )

    def _quarantine_reading(self) -> str | None:
        """Reads the quarantine (keeping the last good reading on failure); the error, if any."""
        if self._read_quarantine is None:
            return None
        try:
            self._quarantine = self._read_quarantine()
        except TableReadError as error:
            return str(error)
        return None

    def build(self) -> Snapshot:
        """Reads the table (and ledger) once and returns the resulting snapshot."""
        now = self._clock()
        read_error: str | None = None
        try:
            self._reading = self._read_table()
            self._last_read_at = now
            self._history.record(now, self._reading.stats)
        except TableReadError as error:
            read_error = str(error)
        reading = self._reading
        tree = build_tree(reading.nodes)
        ledger = self._read_ledger() if self._read_ledger else LedgerState(None, None)
        backlog = self._backlog(now, ledger)
        quarantine_error = self._quarantine_reading()
        verification = verify(
            reading.nodes,
            ledger,
            idle=backlog.idle,
            messages_applied=backlog.applied if reading.stats else None,
            liveness=self._liveness,
        )
        if verification.status == "exact":
            backlog = replace(backlog, exact=True)
        return Snapshot(
            table_name=self._table_name() if callable(self._table_name) else self._table_name,
            generated_at=now,
            tree=tree,
            grand_total=sum_totals(node.totals for node in tree),
            node_count=sum(1 for _ in walk(tree)),
            stats=reading.stats,
            applied_per_second=self._history.applied_per_second(),
            latency=self._history.latency(now),
            chart=self._history.chart(),
            verification=verification,
            read_error=read_error,
            last_read_at=self._last_read_at,
            backlog=backlog,
            quarantine=self._quarantine,
            quarantine_error=quarantine_error,
        )
