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
evicted trade is simply written again, as it would be without the cache. Each entry is
kept packed in one `bytes` (`pack_stored_version`): 35 % less memory than the
`StoredVersion` it stands for with its two strings (docs/benchmarks.md, "Memory per
structure"), for each of the 100,000 default entries of a Lambda execution environment.
"""

import threading
from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StoredVersion:
    """A version the table was seen to hold, with its content digest and the record that wrote it."""

    version: int
    content_digest: str
    """What a message of this version is compared with (`aggregation.batches.is_conflicting_duplicate`):
    the `content_digest` of the message that wrote it, or the `batches.stored_content_digest` of the item
    read back, under the levels of this execution environment (they change only with its configuration)."""
    written_by: str | None  # the Kinesis event ID of the message that wrote this version


_HEX_DIGEST_LENGTH = 64
"""A SHA-256 hex digest, a message's `content_digest`: packed as its 32 bytes."""
_DIGEST_HEX, _DIGEST_TEXT = 0, 1
_LOWER_HEX = frozenset("0123456789abcdef")


def pack_stored_version(stored: StoredVersion) -> bytes:
    """`stored` in one bytes object, exactly (`unpack_stored_version` gives it back equal).

    Layout: the version's length in bytes (1 byte) and its big-endian bytes; the digest's
    kind (1 byte: a lowercase SHA-256 hex digest as its 32 bytes, or any other text, such as
    the digest of a version stored before a level was added (`stored_content_digest`), as its
    2-byte length and UTF-8); then, when there is a writer, its event ID's UTF-8
    (the rest). One object instead of three (a dataclass and two strings), and the hex
    digest at half its size.
    """
    version = stored.version.to_bytes((stored.version.bit_length() + 7) // 8, "big")
    digest = stored.content_digest
    if len(digest) == _HEX_DIGEST_LENGTH and _LOWER_HEX.issuperset(digest):
        digest_part = bytes([_DIGEST_HEX]) + bytes.fromhex(digest)
    else:
        text = digest.encode("utf-8", "surrogatepass")
        digest_part = bytes([_DIGEST_TEXT]) + len(text).to_bytes(2, "big") + text
    writer = b"" if stored.written_by is None else b"\x01" + stored.written_by.encode("utf-8", "surrogatepass")
    return bytes([len(version)]) + version + digest_part + writer


def unpack_stored_version(packed: bytes) -> StoredVersion:
    """The `StoredVersion` `pack_stored_version` packed."""
    end = 1 + packed[0]
    version = int.from_bytes(packed[1:end], "big")
    kind, end = packed[end], end + 1
    if kind == _DIGEST_HEX:
        digest, end = packed[end : end + 32].hex(), end + 32
    else:
        length = int.from_bytes(packed[end : end + 2], "big")
        digest, end = packed[end + 2 : end + 2 + length].decode("utf-8", "surrogatepass"), end + 2 + length
    writer = packed[end + 1 :].decode("utf-8", "surrogatepass") if len(packed) > end else None
    return StoredVersion(version, digest, writer)


def settles(stored: StoredVersion | None, version: int) -> bool:
    """Whether `stored`, a version the table was seen to hold, decides a message of `version`
    without a write: it does when the message's version is not above it (its condition would fail)."""
    return stored is not None and version <= stored.version


class VersionCache:
    """TradeID -> the highest `StoredVersion` seen, least recently used evicted beyond `capacity`.

    Entries are kept packed (`pack_stored_version`) and unpacked when read. Thread-safe: the
    state function's writer pool remembers outcomes from several threads.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"a version cache holds 0 or more entries, not {capacity}")
        self.capacity = capacity
        self._entries: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, trade_id: str) -> StoredVersion | None:
        with self._lock:
            packed = self._entries.get(trade_id)
            if packed is None:
                return None
            self._entries.move_to_end(trade_id)
        return unpack_stored_version(packed)

    def remember(self, trade_id: str, stored: StoredVersion) -> None:
        """Keep `stored` unless a higher version of the trade is already known (versions only grow)."""
        if self.capacity == 0:
            return
        packed = pack_stored_version(stored)
        with self._lock:
            known = self._entries.get(trade_id)
            if known is None or stored.version > unpack_stored_version(known).version:
                self._entries[trade_id] = packed
            self._entries.move_to_end(trade_id)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
