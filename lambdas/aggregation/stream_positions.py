"""Where a map batch sits in its stream, and which of its records earlier batches already covered.

The map stage is idempotent per *stream position*, not per batch: each delta item names
the shard of the StateTable stream and the first and last sequence numbers of the records
it summed. A record is mapped once when, before writing, the records that an existing item
of the same shard already covers are skipped and only the rest is written. So a retry is
harmless whatever its boundaries: the same batch, a grown one (more records arrived), a
shrunk one (a smaller batch size), one starting earlier (a replay), or one split anywhere.

What this relies on, and where AWS documents it:
- a record's shard and sequence number never change, and sequence numbers increase within a
  shard (DynamoDB Streams API Reference, `StreamRecord.SequenceNumber`, `Shard`);
- Lambda reads each shard in order and a batch, sorted, is a run of consecutive records of one
  shard, a retry's too, which with a tumbling window may list them out of order (Lambda
  Developer Guide, "How Lambda processes records from DynamoDB Streams" and "Tumbling windows";
  docs/design.md, "What a retry holds"; the map mapping has no filter, so no record is left out
  of a run);
- the batch's shard id is in the event when the mapping has a tumbling window (Lambda
  Developer Guide, "DynamoDB tumbling windows": `shardId`), which the map mapping sets for
  that reason alone.
Nothing relies on Lambda retrying the identical batch.
"""

import hashlib
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

COVERAGE_QUERY_PAGE_ITEMS = 1
"""Items per page of the map's coverage Query (its `Limit`). A Query reads and bills every item
of a page in full, whatever the projection, and the newest item starting at or before a batch's
last record (the shard's previous item, for a new batch) usually settles coverage: one item a
page, and a retry that overlaps several items pages on."""

SEQUENCE_NUMBER_DIGITS = 40
"""DynamoDB Streams sequence numbers have 21 to 40 digits; stored zero-padded to 40 so that
the sort key (a string) orders like the numbers."""


@dataclass(frozen=True)
class StreamRun:
    """Consecutive records of one shard: the stream position a delta item covers."""

    stream_shard: str
    first_sequence_number: int
    last_sequence_number: int

    def __post_init__(self) -> None:
        if self.first_sequence_number > self.last_sequence_number:
            raise ValueError(f"a run cannot end ({self.last_sequence_number}) before it starts")

    def covers(self, sequence_number: int) -> bool:
        return self.first_sequence_number <= sequence_number <= self.last_sequence_number

    @property
    def batch_hash(self) -> str:
        """SHA-256 hex of the run's shard and first record: the delta item's identity.

        Reduce markers, transaction tokens and archive keys are derived from it. Two items of
        one shard never start at the same record, and shard keys are unique per stream.
        """
        position = f"{self.stream_shard}\n{sequence_key(self.first_sequence_number)}"
        return hashlib.sha256(position.encode("utf-8")).hexdigest()


def sequence_number(text: str) -> int:
    """A stream record's sequence number as an integer (refuses anything else)."""
    if not text.isdigit() or len(text) > SEQUENCE_NUMBER_DIGITS:
        raise ValueError(f"{text!r} is not a stream sequence number (1 to {SEQUENCE_NUMBER_DIGITS} digits)")
    return int(text)


def sequence_key(number: int) -> str:
    """The zero-padded text stored in the DeltaTable's sort key."""
    if not 0 <= number < 10**SEQUENCE_NUMBER_DIGITS:
        raise ValueError(f"{number} is not a stream sequence number")
    return f"{number:0{SEQUENCE_NUMBER_DIGITS}d}"


def stream_shard_key(event_source_arn: str, shard_id: str) -> str:
    """`<stream label>/<shard id>`: a shard, unique across every stream the table ever had.

    A stream ARN ends in `/stream/<label>` (a timestamp); shard ids are unique within one
    stream, and a table that re-enables its stream gets a new label.
    """
    if not shard_id:
        raise ValueError("the event names no shard (the map mapping needs a tumbling window)")
    _, separator, label = event_source_arn.rpartition("/stream/")
    if not separator or not label:
        raise ValueError(f"{event_source_arn!r} is not a DynamoDB stream ARN")
    return f"{label}/{shard_id}"


def uncovered_runs(sequence_numbers: Sequence[int], covered: Iterable[StreamRun]) -> list[list[int]]:
    """The batch's records no existing item covers, as maximal runs of consecutive records.

    `sequence_numbers` are the batch's records in stream order (increasing). A record inside
    any covered run is skipped; each gap between covered records becomes its own run, so a
    new item never claims a record that another item already holds.
    """
    if any(later <= earlier for earlier, later in itertools.pairwise(sequence_numbers)):
        raise ValueError("a batch's sequence numbers must increase")
    runs_covered = list(covered)
    runs: list[list[int]] = []
    current: list[int] = []
    for number in sequence_numbers:
        if any(run.covers(number) for run in runs_covered):
            if current:
                runs.append(current)
                current = []
            continue
        current.append(number)
    if current:
        runs.append(current)
    return runs
