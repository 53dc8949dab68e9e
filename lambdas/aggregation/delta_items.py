"""The DeltaTable item: its attribute names, and its one encoder and decoder.

The map function writes it, reduce and archive read it from the DeltaTable stream. The
item is encoded straight to DynamoDB's typed JSON, and decoded from it, here: numbers
travel as their exact text in both directions (`aggregation.stream_images`), so no
library's number handling sits between a message's Value and the totals.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from aggregation.deltas import NodeDelta
from aggregation.exact import number_attribute
from aggregation.item_size import MAX_ITEM_BYTES, item_size_bytes
from aggregation.names import EXPIRES_AT, NODE_TRADE_COUNT, NODE_VALUE
from aggregation.stream_images import ImageDecodingError, decode_image, decode_number
from aggregation.stream_positions import StreamRun, sequence_key, sequence_number
from aggregation.transactions import DeltaBatch

# Key: one partition per StateTable stream shard, items sorted by their first record.
STREAM_SHARD = "StreamShard"
FIRST_SEQUENCE_NUMBER = "FirstSequenceNumber"
LAST_SEQUENCE_NUMBER = "LastSequenceNumber"
BATCH_HASH = "BatchHash"
DELTAS = "Deltas"
RECORD_COUNT = "RecordCount"
PRODUCER_TIMESTAMPS = "ProducerTimestamps"
CREATED_AT = "CreatedAt"
WRITTEN_BY_REQUEST_ID = "WrittenByRequestId"
"""Added to the item by the map function: the Lambda request id of the invocation that wrote it."""
# `ExpiresAt` (the TTL) and a node's `Value` and `TradeCount`: `aggregation.names`.

DEFAULT_DELTA_TTL_DAYS = 7
"""How long a delta item is kept unless configured (`deltaTtlDays`, `DELTA_TTL_DAYS`)."""

MIN_DELTA_TTL_DAYS = 2
"""The shortest delta TTL accepted: a map batch replayed (from the 24-hour StateTable stream)
after its delta item expired would find no coverage and be written, and counted, again."""


@dataclass(frozen=True)
class DeltaItem:
    """One DeltaTable item: a run of the StateTable stream and the net deltas of its records."""

    run: StreamRun
    batch: DeltaBatch
    expires_at: int

    def __post_init__(self) -> None:
        if self.batch.batch_hash != self.run.batch_hash:
            raise ValueError("a delta item's BatchHash is the identity of its stream run")


def encode_delta_item(item: DeltaItem) -> dict[str, Any]:
    """The item as PutItem takes it (typed JSON); nodes in key order, numbers exact."""
    batch = item.batch
    return {
        STREAM_SHARD: {"S": item.run.stream_shard},
        FIRST_SEQUENCE_NUMBER: {"S": sequence_key(item.run.first_sequence_number)},
        LAST_SEQUENCE_NUMBER: {"S": sequence_key(item.run.last_sequence_number)},
        BATCH_HASH: {"S": batch.batch_hash},
        DELTAS: {
            "M": {
                key: {
                    "M": {
                        NODE_VALUE: number_attribute(delta.value),
                        NODE_TRADE_COUNT: number_attribute(delta.trade_count),
                    }
                }
                for key, delta in sorted(batch.deltas.items())
            }
        },
        RECORD_COUNT: number_attribute(batch.record_count),
        PRODUCER_TIMESTAMPS: {"L": [number_attribute(timestamp) for timestamp in batch.producer_timestamps]},
        CREATED_AT: number_attribute(batch.created_at),
        EXPIRES_AT: number_attribute(item.expires_at),
    }


REQUEST_ID_BYTES = 36
"""The length of a Lambda request id (`WRITTEN_BY_REQUEST_ID`)."""


def fits_item_limit(encoded: Mapping[str, Any]) -> bool:
    """Whether DynamoDB stores an encoded item (`encode_delta_item`) once the map function adds
    its `WRITTEN_BY_REQUEST_ID`, counted by DynamoDB's own rules (`aggregation.item_size`).

    An item over the limit would be refused on every retry of its map batch, stalling the
    shard; the map function splits a run until each part fits (one record always fits:
    `aggregation.delta_item_size`).
    """
    written_by = {WRITTEN_BY_REQUEST_ID: {"S": "x" * REQUEST_ID_BYTES}}
    return item_size_bytes({**encoded, **written_by}) <= MAX_ITEM_BYTES


def _integer(value: Any, name: str) -> int:
    if not isinstance(value, Decimal) or value != value.to_integral_value():
        raise ImageDecodingError(f"{name} must be an integer, got {value!r}")
    return int(value)


def _payload(attribute: Any, kind: str, name: str) -> Any:
    """The payload of a typed attribute of type `kind` (`{"N": "1.5"}` -> `"1.5"`); refuses any other."""
    if not isinstance(attribute, dict) or len(attribute) != 1 or kind not in attribute:
        raise ImageDecodingError(f"{name} must be of DynamoDB type {kind}, got {attribute!r}")
    return attribute[kind]


def _decode_deltas(attribute: Any) -> dict[str, NodeDelta]:
    """The `Deltas` map, read straight from its typed JSON (each node `{"M": {"Value": {"N": ..},
    "TradeCount": {"N": ..}}}`; other attributes of a node are ignored, as before), numbers by
    `decode_number`: a delta item holds one node per aggregate it changes, and the generic
    `decode_image` per node cost the reduce function more than the transactions it sends for
    them (docs/benchmarks.md, section 3)."""
    deltas: dict[str, NodeDelta] = {}
    for key, node in _payload(attribute, "M", DELTAS).items():
        fields: Any = node.get("M") if isinstance(node, dict) and len(node) == 1 else None
        try:
            value, trade_count = fields[NODE_VALUE]["N"], fields[NODE_TRADE_COUNT]["N"]
        except (KeyError, TypeError):
            raise ImageDecodingError(f"{DELTAS}.{key} must hold a Value and a TradeCount, got {node!r}") from None
        deltas[key] = NodeDelta(
            decode_number(value), _integer(decode_number(trade_count), f"{DELTAS}.{key}.{NODE_TRADE_COUNT}")
        )
    return deltas


def _decode_timestamps(attribute: Any) -> tuple[Decimal, ...]:
    """`ProducerTimestamps`, one number per message, read straight from its typed JSON (`_decode_deltas`)."""
    return tuple(
        decode_number(_payload(timestamp, "N", PRODUCER_TIMESTAMPS))
        for timestamp in _payload(attribute, "L", PRODUCER_TIMESTAMPS)
    )


def decode_delta_batch(image: Mapping[str, Any]) -> DeltaBatch:
    """What reduce and archive need of a DeltaTable item's stream image (typed JSON).

    Its two large attributes, one entry per node and per message, are read by the dedicated
    decoders above; every other attribute by the generic `decode_image`.
    """
    item = decode_image({name: value for name, value in image.items() if name not in (DELTAS, PRODUCER_TIMESTAMPS)})
    if not isinstance(item.get(BATCH_HASH), str):
        raise ImageDecodingError("a delta item has a BatchHash")
    return DeltaBatch(
        batch_hash=item[BATCH_HASH],
        deltas=_decode_deltas(image[DELTAS]) if DELTAS in image else {},
        record_count=_integer(item.get(RECORD_COUNT, Decimal(0)), RECORD_COUNT),
        producer_timestamps=_decode_timestamps(image[PRODUCER_TIMESTAMPS]) if PRODUCER_TIMESTAMPS in image else (),
        created_at=_integer(item.get(CREATED_AT, Decimal(0)), CREATED_AT),
    )


def decode_stream_run(item: Mapping[str, Any]) -> StreamRun:
    """The stream position of an item read back from the DeltaTable (typed JSON)."""
    try:
        return StreamRun(
            stream_shard=item[STREAM_SHARD]["S"],
            first_sequence_number=sequence_number(item[FIRST_SEQUENCE_NUMBER]["S"]),
            last_sequence_number=sequence_number(item[LAST_SEQUENCE_NUMBER]["S"]),
        )
    except (KeyError, TypeError) as error:
        raise ImageDecodingError(f"a delta item lacks its stream position ({error})") from None
