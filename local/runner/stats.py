"""Counters the runner keeps per function and per shard, and the file `make status` reads.

The runner rewrites `.local/runner-stats.json` about once a second (atomically), so
`python -m local status` works from any shell without talking to the runner.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class FunctionStats:
    invocations: int = 0
    errors: int = 0  # failed invocations, timeouts included
    timeouts: int = 0
    retries: int = 0  # re-deliveries of a batch (or of its unprocessed tail)
    records_processed: int = 0  # records in batches the function completed
    records_filtered: int = 0  # records FilterCriteria dropped (checkpointed, never delivered)
    batches_skipped: int = 0  # batches given up after MaximumRetryAttempts
    batches_expired: int = 0  # batches (or their first records) discarded: past MaximumRecordAgeInSeconds, or trimmed
    records_dropped: int = 0  # records discarded unprocessed, for either reason (Lambda's DroppedEventCount)
    destination_deliveries: int = 0  # invocation records of discarded batches sent to the on-failure destination
    destination_delivery_failures: int = 0  # ... that could not be sent (Lambda's DestinationDeliveryFailures)
    unread_records_trimmed: int = 0  # times a mapping's position was trimmed before it read on (records lost unseen)
    cold_starts: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0  # the most invocations that ran at once (concurrent reducers, say)
    last_error: str = ""
    injected_failures: dict[str, int] = field(default_factory=dict)  # fault injection: before_write / after_write
    reshaped_retries: dict[str, int] = field(default_factory=dict)  # redelivery: grown, shrunk, shifted, reordered
    again_after_success: int = 0  # redelivery policy: batches delivered once more after they succeeded


@dataclass
class ShardStats:
    function: str
    source: str  # "kinesis" or "dynamodb"
    source_name: str
    shard_id: str
    ready: bool = False
    records_read: int = 0
    records_pending: int = 0  # read from the shard, not yet checkpointed
    ms_behind: int = 0
    checkpoint: str | None = None
    last_activity: float = field(default_factory=time.time)
    caught_up_at: float = 0.0  # start of the last read that found nothing new and nothing buffered (0: none yet)
    lanes: int = 1  # concurrent batches the shard may have (ParallelizationFactor; 1 with a tumbling window)
    batches_in_flight: int = 0
    peak_batches_in_flight: int = 0  # the most batches of this shard that ran at once (at most `lanes`)


class RunnerStats:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.lock = threading.RLock()  # re-entrant: `function()` may be called while holding it
        self.functions: dict[str, FunctionStats] = {}
        self.shards: dict[str, ShardStats] = {}
        self.started_at = time.time()
        self.ready = False
        self.last_invocation_at = 0.0
        self.fault_injection: dict[str, str] = {}

    def function(self, name: str) -> FunctionStats:
        with self.lock:
            return self.functions.setdefault(name, FunctionStats())

    def shard(self, key: str, **initial: Any) -> ShardStats:
        with self.lock:
            if key not in self.shards:
                self.shards[key] = ShardStats(**initial)
            return self.shards[key]

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "pid": os.getpid(),
                "started_at": self.started_at,
                "updated_at": time.time(),
                "ready": self.ready,
                "fault_injection": dict(self.fault_injection),
                "last_invocation_at": self.last_invocation_at,
                "functions": {name: asdict(stats) for name, stats in sorted(self.functions.items())},
                "shards": [asdict(stats) for _, stats in sorted(self.shards.items())],
            }

    def write(self) -> None:
        if self.path is None:
            return
        snapshot = self.snapshot()
        temporary = self.path.with_name(f".{self.path.name}.tmp")
        temporary.write_text(json.dumps(snapshot, indent=1))
        os.replace(temporary, self.path)


def read_stats(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
