"""Committed stream positions, one per (event source mapping, shard), persisted atomically.

A checkpoint is the sequence number of the last record whose batch the function finished
(or that was filtered out, or skipped after retries ran out). It is written after every
successful batch with write-to-temporary + fsync + rename, so a runner killed at any
instant (SIGKILL included) restarts from the last committed position and re-delivers the
batch that was in flight: at-least-once delivery, as Lambda's stream pollers provide.
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
            self._positions: dict[str, str] = json.loads(path.read_text())
        except (OSError, ValueError):
            self._positions = {}

    @staticmethod
    def key(mapping_uuid: str, shard_id: str) -> str:
        return f"{mapping_uuid}/{shard_id}"

    def get(self, mapping_uuid: str, shard_id: str) -> str | None:
        with self._lock:
            return self._positions.get(self.key(mapping_uuid, shard_id))

    def commit(self, mapping_uuid: str, shard_id: str, sequence_number: str) -> None:
        with self._lock:
            self._positions[self.key(mapping_uuid, shard_id)] = sequence_number
            self._write()

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with temporary.open("w") as file:
            json.dump(self._positions, file, indent=1, sort_keys=True)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.path)
