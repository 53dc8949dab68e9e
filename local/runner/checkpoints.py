"""Committed stream positions and in-flight batches, per (event source mapping, shard).

A checkpoint is the sequence number of the last record whose batch the function finished
(or that was filtered out, or skipped after retries ran out). Before a batch is first
delivered, its *end* (the sequence number of its last consumed record) is recorded as in
flight. Both are written with write-to-temporary + fsync + rename, so a runner killed at
any instant (SIGKILL included) restarts from the last committed position and re-delivers
exactly the batch that was in flight: the same records, not a batch re-formed from
whatever has arrived since. Lambda's retries are modelled apart, with reshaped batches on
request (`redelivery.py`); the map stage does not depend on either: its delta items are keyed
by stream position, (StreamShard, FirstSequenceNumber), and a retry in any boundaries maps
only the records no item covers yet (`aggregation.stream_positions`).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path


class CheckpointStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError):
            saved = {}
        self._positions: dict[str, str] = dict(saved.get("committed", {}))
        self._in_flight: dict[str, str] = dict(saved.get("in_flight", {}))

    @staticmethod
    def key(mapping_uuid: str, shard_id: str) -> str:
        return f"{mapping_uuid}/{shard_id}"

    def get(self, mapping_uuid: str, shard_id: str) -> str | None:
        with self._lock:
            return self._positions.get(self.key(mapping_uuid, shard_id))

    def in_flight_end(self, mapping_uuid: str, shard_id: str) -> str | None:
        """The last sequence number of the batch that was being delivered, if any."""
        with self._lock:
            return self._in_flight.get(self.key(mapping_uuid, shard_id))

    def begin(self, mapping_uuid: str, shard_id: str, batch_end: str) -> None:
        """Record the batch ending at `batch_end` as in flight, before its first delivery."""
        with self._lock:
            self._in_flight[self.key(mapping_uuid, shard_id)] = batch_end
            self._write()

    def commit(self, mapping_uuid: str, shard_id: str, sequence_number: str) -> None:
        """Commit a position; a batch whose end is now committed is no longer in flight."""
        key = self.key(mapping_uuid, shard_id)
        with self._lock:
            self._positions[key] = sequence_number
            end = self._in_flight.get(key)
            if end is not None and int(sequence_number) >= int(end):
                del self._in_flight[key]
            self._write()

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with temporary.open("w") as file:
            json.dump({"committed": self._positions, "in_flight": self._in_flight}, file, indent=1, sort_keys=True)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.path)
