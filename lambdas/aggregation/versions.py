"""What the StateTable is known to hold, remembered per execution environment to save writes.

A trade's stored Version never decreases: the state function writes only through a
conditional update that requires a higher version, and nothing else writes or deletes
state items. So once this environment has *seen* the table hold Version v of a TradeID,
any later message of that TradeID with a Version up to v would fail its condition: its
write can be skipped, and what the failed condition would have reported (a duplicate, a
conflicting duplicate, or the record's own earlier write) can be told from what was seen.

Only two outcomes are seen, and only they are remembered:

- a conditional update that succeeded: the table now holds the message's version;
- one that failed its condition: DynamoDB returned the stored item, whose version is at
  least the message's.

A write whose outcome is unknown (an exception, a response lost beyond the SDK's retries)
teaches nothing and is never remembered. The conditional update stays the only
authority: a message above the remembered version is always written.

What is reported can differ from a failed condition's report in one case only: when the
table has moved past the remembered version since (another execution environment wrote
a newer one). A conflicting duplicate of the remembered version is then still reported
as a conflict (the condition would have called it stale), and a retried record that
wrote the remembered version still counts as written. A conflict the condition would
report is never hidden, and the table's content is the same either way.

The memory is a bounded LRU (`stateVersionCacheSize` entries, 0 switches it off); an
evicted trade is simply written again, as it would be without the cache.
"""

import threading
from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StoredVersion:
    """A version the table was seen to hold, with its content digest and the record that wrote it."""

    version: int
    content_digest: str | None
    written_by: str | None  # the Kinesis event ID of the message that wrote this version


class VersionCache:
    """TradeID -> the highest `StoredVersion` seen, least recently used evicted beyond `capacity`.

    Thread-safe: the state function's writer pool remembers outcomes from several threads.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"a version cache holds 0 or more entries, not {capacity}")
        self.capacity = capacity
        self._entries: OrderedDict[str, StoredVersion] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, trade_id: str) -> StoredVersion | None:
        with self._lock:
            stored = self._entries.get(trade_id)
            if stored is not None:
                self._entries.move_to_end(trade_id)
            return stored

    def settling(self, trade_id: str, version: int) -> StoredVersion | None:
        """The stored version known to decide a message of `version` without a write, if any.

        It does when the message's version is not above it: its condition would fail.
        """
        stored = self.get(trade_id)
        return stored if stored is not None and version <= stored.version else None

    def remember(self, trade_id: str, stored: StoredVersion) -> None:
        """Keep `stored` unless a higher version of the trade is already known (versions only grow)."""
        if self.capacity == 0:
            return
        with self._lock:
            known = self._entries.get(trade_id)
            if known is None or stored.version > known.version:
                self._entries[trade_id] = stored
            self._entries.move_to_end(trade_id)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
