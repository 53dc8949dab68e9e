"""Reading back, during and after a load test, what the pipeline applied and how fast.

`producer send` shows, as it runs, the rate at which the pipeline applies messages and their
end-to-end latency (producer `Timestamp` to totals committed), and at the end p50, p99 and the
maximum over the run: the figures its users watch a load test by. They come from the pipeline
itself, never from the producer's own clock:

- locally (the emulator), from the AggregateTable's `#stats` slices: `MessagesApplied` and the
  latency histogram the reduce stage keeps (`aggregation.latency`), read with the domain's one
  reader (`combined_stats`);
- on AWS, from CloudWatch (`GetMetricData`): the reduce stage's high-resolution
  `MessagesApplied` and `EndToEndLatency` metrics in the stack's own namespace (its
  `MetricsNamespace` output), whose percentiles CloudWatch computes. EMF
  metrics reach CloudWatch some seconds after the invocation, so the live figures trail.

A reading is a figure, never part of the exactness check (that is `producer verify`'s).
"""

from __future__ import annotations

import collections
import datetime as dt
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from boto3.dynamodb.types import TypeDeserializer
from botocore.exceptions import BotoCoreError, ClientError

from aggregation.aggregate_items import combined_stats, is_stats_key, stats_item_key
from aggregation.latency import bucket_upper_ms, difference, histogram_of, percentile_ms
from aggregation.names import (
    AGGREGATE_KEY,
    END_TO_END_LATENCY,
    MESSAGES_APPLIED,
    REDUCE_SERVICE,
    STATS_KEY,
)
from toolkit.pipeline import PipelineTarget

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

LOCAL_INTERVAL_SECONDS = 1.0
CLOUDWATCH_INTERVAL_SECONDS = 10.0
"""How often a watch reads: the stats items are cheap to read; CloudWatch's high-resolution
figures come in 10-second periods."""
LOCAL_SETTLE_SECONDS = 5.0
CLOUDWATCH_SETTLE_SECONDS = 90.0
"""How long applied figures must stand still after sending before the pipeline counts as done:
CloudWatch shows an invocation's metrics a minute or more after it ran."""
LOCAL_WINDOW_SECONDS = 5.0
"""The live figures' window locally: one reduce invocation a second would make a 1-s window flicker."""
RESCAN_SECONDS = 15.0
_BATCH_GET_LIMIT = 100
KNOWN_SLICES = _BATCH_GET_LIMIT


@dataclass(frozen=True)
class Figures:
    """What the pipeline applied since the watch began, and how fast.

    Live, `rate` and the latency figures are over the latest window (the last `LOCAL_WINDOW_SECONDS`
    locally, the latest 10-second period of CloudWatch's); in a
    run's summary, over the whole run (`rate`: applied messages over the time from the first
    send to the last change seen). Latencies in milliseconds; None when nothing was measured.
    """

    applied: int
    rate: float | None
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None


class PipelineReader(Protocol):
    """One source of figures: the stack's `#stats` or CloudWatch."""

    interval: float
    settle: float

    def sample(self) -> Figures:
        """The figures since the last sample (`applied`: since the reader was made)."""

    def summary(self) -> Figures:
        """The figures since the reader was made."""


@dataclass(frozen=True)
class _StatsReading:
    applied: int
    buckets: dict[int, int]
    at: float


class StatsTableReader:
    """The AggregateTable's `#stats` slices (the local runtime: no CloudWatch there).

    Each reading gets the first `KNOWN_SLICES` slices by key (`stats_item_key`: the default
    16 slices and more) and those a scan found; the scan (again every `RESCAN_SECONDS`) finds
    slices beyond them, so the emulator is not scanned every second.
    """

    interval = LOCAL_INTERVAL_SECONDS
    settle = LOCAL_SETTLE_SECONDS

    def __init__(self, client: DynamoDBClient, table: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._table = table
        self._clock = clock
        self._keys: list[str] = []
        self._scanned_at = -math.inf
        self._deserializer = TypeDeserializer()
        self._start = self._read()
        self._previous = self._start
        self._window: collections.deque[_StatsReading] = collections.deque([self._start])
        self._changes: list[_StatsReading] = []
        """The first and the latest reading that found more messages applied than the one before."""

    def _items(self) -> list[dict[str, Any]]:
        if self._clock() - self._scanned_at >= RESCAN_SECONDS:
            paginator = self._client.get_paginator("scan")
            pages = paginator.paginate(
                TableName=self._table,
                FilterExpression="begins_with(#key, :stats)",
                ExpressionAttributeNames={"#key": AGGREGATE_KEY},
                ExpressionAttributeValues={":stats": {"S": STATS_KEY}},
            )
            raw = [item for page in pages for item in page.get("Items", [])]
            self._scanned_at = self._clock()
        else:
            raw = []
            keys = sorted({*(stats_item_key(index) for index in range(KNOWN_SLICES)), *self._keys})
            for start in range(0, len(keys), _BATCH_GET_LIMIT):
                request: Any = {
                    self._table: {"Keys": [{AGGREGATE_KEY: {"S": key}} for key in keys[start : start + 100]]}
                }
                while request:
                    response = self._client.batch_get_item(RequestItems=request)
                    raw.extend(response.get("Responses", {}).get(self._table, []))
                    request = response.get("UnprocessedKeys") or None
        items = [{name: self._deserializer.deserialize(value) for name, value in item.items()} for item in raw]
        items = [item for item in items if is_stats_key(str(item.get(AGGREGATE_KEY, "")))]
        self._keys = sorted({*self._keys, *(str(item[AGGREGATE_KEY]) for item in items)})
        return items

    def _read(self) -> _StatsReading:
        stats = combined_stats(self._items())
        if stats is None:
            return _StatsReading(0, {}, self._clock())
        return _StatsReading(int(stats[MESSAGES_APPLIED]), histogram_of(stats), self._clock())

    def sample(self) -> Figures:
        reading = self._read()
        previous, self._previous = self._previous, reading
        if reading.applied != previous.applied:
            self._changes = [self._changes[0] if self._changes else previous, reading]
        while len(self._window) > 1 and reading.at - self._window[1].at >= LOCAL_WINDOW_SECONDS:
            self._window.popleft()
        oldest = self._window[0]
        self._window.append(reading)
        elapsed = reading.at - oldest.at
        rate = (reading.applied - oldest.applied) / elapsed if elapsed > 0 else None
        return _figures(reading.applied - self._start.applied, rate, difference(reading.buckets, oldest.buckets))

    def summary(self) -> Figures:
        reading = self._read()
        rate = None
        if len(self._changes) == 2 and self._changes[1].at > self._changes[0].at:
            first, last = self._changes
            rate = (last.applied - first.applied) / (last.at - first.at)
        return _figures(reading.applied - self._start.applied, rate, difference(reading.buckets, self._start.buckets))


def _figures(applied: int, rate: float | None, buckets: dict[int, int]) -> Figures:
    return Figures(
        applied=applied,
        rate=rate,
        p50_ms=percentile_ms(buckets, 0.5),
        p99_ms=percentile_ms(buckets, 0.99),
        max_ms=bucket_upper_ms(max(buckets)) if buckets else None,
    )


class CloudWatchReader:
    """The reduce stage's `MessagesApplied` and `EndToEndLatency` metrics (a deployed stack), read
    under that stack's own `namespace` (its `MetricsNamespace` output): another stack's reducers in
    the same account and region emit the same names and dimension into their own namespace."""

    interval = CLOUDWATCH_INTERVAL_SECONDS
    settle = CLOUDWATCH_SETTLE_SECONDS
    _PERIOD = 10

    def __init__(self, client: Any, namespace: str, now: Callable[[], dt.datetime] | None = None) -> None:
        self._client = client
        self._namespace = namespace
        self._now = now or (lambda: dt.datetime.now(dt.UTC))
        self._started = self._now()

    def _query(self, start: dt.datetime, end: dt.datetime, period: int) -> dict[str, list[tuple[dt.datetime, float]]]:
        dimensions = [{"Name": "service", "Value": REDUCE_SERVICE}]
        queries = [
            ("applied", MESSAGES_APPLIED, "Sum"),
            ("p50", END_TO_END_LATENCY, "p50"),
            ("p99", END_TO_END_LATENCY, "p99"),
            ("max", END_TO_END_LATENCY, "Maximum"),
        ]
        request = [
            {
                "Id": query_id,
                "MetricStat": {
                    "Metric": {"Namespace": self._namespace, "MetricName": name, "Dimensions": dimensions},
                    "Period": period,
                    "Stat": statistic,
                },
            }
            for query_id, name, statistic in queries
        ]
        series: dict[str, list[tuple[dt.datetime, float]]] = {query_id: [] for query_id, _, _ in queries}
        paginator = self._client.get_paginator("get_metric_data")
        for page in paginator.paginate(MetricDataQueries=request, StartTime=start, EndTime=end):
            for result in page["MetricDataResults"]:
                series[result["Id"]].extend(zip(result["Timestamps"], result["Values"], strict=True))
        return series

    def sample(self) -> Figures:
        series = self._query(self._started - dt.timedelta(seconds=self._PERIOD), self._now(), self._PERIOD)
        applied = sum(value for _, value in series["applied"])
        latest = max((when for when, _ in series["applied"]), default=None)

        def at_latest(query_id: str) -> float | None:
            return next((value for when, value in series[query_id] if when == latest), None)

        rate = None if latest is None else (at_latest("applied") or 0.0) / self._PERIOD
        return Figures(round(applied), rate, at_latest("p50"), at_latest("p99"), at_latest("max"))

    def summary(self) -> Figures:
        start = self._started.replace(second=0, microsecond=0)
        end = self._now()
        minutes = max(1, math.ceil((end - start).total_seconds() / 60))
        series = self._query(start, start + dt.timedelta(minutes=minutes), 60 * minutes)
        busy = [when for when, value in self._query(start, end, self._PERIOD)["applied"] if value > 0]
        rate = None

        def single(query_id: str) -> float | None:
            values = [value for _, value in series[query_id]]
            return values[0] if values else None

        applied = round(single("applied") or 0)
        if busy:
            rate = applied / ((max(busy) - min(busy)).total_seconds() + self._PERIOD)
        return Figures(applied, rate, single("p50"), single("p99"), single("max"))


def pipeline_reader(target: PipelineTarget) -> PipelineReader:
    """The stack's `#stats` locally, CloudWatch on AWS."""
    if target.is_local:
        return StatsTableReader(target.dynamodb(), target.require("aggregate_table").aggregate_table)
    return CloudWatchReader(target.client("cloudwatch"), target.metrics_namespace)


FALLING_BEHIND_SHARE = 0.7
"""The pipeline falls behind when it applies less than this share of the changing messages sent."""
FALLING_BEHIND_SECONDS = 15.0
"""... for this long: a batch's worth of latency at the start or a short stall is no backlog."""


FALLING_BEHIND_WINDOW_SECONDS = 10.0
"""Both rates are taken over this trailing window: sending comes in put_records bursts."""


@dataclass
class BacklogCheck:
    """Whether the pipeline keeps up with what is sent: the warning, once, when it has not for a while.

    The README's load test must not quietly build a queue that drains long after sending stops
    (the local stack sustains far less than AWS). Over a trailing window it compares the rate of
    messages sent that change a trade (`applying_share` of all sent) with the rate the pipeline
    applied (read back from the pipeline), both from cumulative counts, so neither a burst of
    puts nor an estimate of the share a little off can raise it.
    """

    applying_share: float
    hold_seconds: float = FALLING_BEHIND_SECONDS
    window_seconds: float = FALLING_BEHIND_WINDOW_SECONDS
    samples: collections.deque[tuple[float, int, int]] = field(default_factory=collections.deque)
    behind_since: float | None = None
    warned: bool = False

    def observe(self, sent: int, applied: int, now: float) -> str | None:
        """The warning the first time the pipeline has applied too little for `hold_seconds`."""
        self.samples.append((now, sent, applied))
        while len(self.samples) > 1 and now - self.samples[1][0] >= self.window_seconds:
            self.samples.popleft()
        then, sent_then, applied_then = self.samples[0]
        if now - then < self.window_seconds:
            return None  # not a whole window yet
        expected = (sent - sent_then) * self.applying_share / (now - then)
        applied_rate = (applied - applied_then) / (now - then)
        if expected <= 0 or applied_rate >= FALLING_BEHIND_SHARE * expected:
            self.behind_since = None
            return None
        if self.behind_since is None:
            self.behind_since = now
        if self.warned or now - self.behind_since < self.hold_seconds:
            return None
        self.warned = True
        return (
            f"warning: the pipeline is falling behind: it applies {applied_rate:,.0f} msg/s of the "
            f"{expected:,.0f} msg/s sent that change a trade, so a backlog grows until sending stops "
            "(lower --rate)"
        )


class PipelineWatch:
    """Samples a reader in the background; the latest figures (or the error that stopped it) for a display,
    and a warning when the pipeline falls behind the sending (`follow_sending`)."""

    def __init__(self, reader: PipelineReader, backlog: BacklogCheck | None = None) -> None:
        self.reader = reader
        self.backlog = backlog
        self.latest: Figures | None = None
        self.error: str | None = None
        self._warning: str | None = None
        self._sent: Callable[[], int] | None = None
        self._changed_at = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pipeline-watch", daemon=True)
        self._lock = threading.Lock()

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.reader.interval):
            try:
                figures = self.reader.sample()
            except (ClientError, BotoCoreError) as error:
                self.error = " ".join(str(error).split())
                continue
            with self._lock:
                if self.latest is None or figures.applied != self.latest.applied:
                    self._changed_at = time.monotonic()
                self.latest = figures
                self.error = None
                self._check_backlog(figures)

    def follow_sending(self, sent: Callable[[], int]) -> None:
        """Compare what the pipeline applies with what `sent` (the sender's count, any thread) says was sent."""
        with self._lock:
            self._sent = sent

    def _check_backlog(self, figures: Figures) -> None:
        if self._sent is None or self.backlog is None:
            return
        warning = self.backlog.observe(self._sent(), figures.applied, time.monotonic())
        self._warning = warning or self._warning

    def take_warning(self) -> str | None:
        """The falling-behind warning, once: a display prints it and it is gone."""
        with self._lock:
            warning, self._warning = self._warning, None
            return warning

    def wait_until_settled(self, timeout: float, sleep: Callable[[float], None] = time.sleep) -> bool:
        """Wait until the applied count stood still for the reader's settle time (True), or the
        timeout passed (False)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._changed_at = max(self._changed_at, time.monotonic() - self.reader.interval)
        while time.monotonic() < deadline:
            with self._lock:
                if time.monotonic() - self._changed_at >= self.reader.settle:
                    return True
            sleep(min(0.2, self.reader.interval))
        return False

    def stop(self) -> Figures:
        """Stop sampling; the figures of the whole run."""
        self._stop.set()
        self._thread.join()
        return self.reader.summary()
