"""The largest DeltaTable item a run of map records can need: why one record always fits.

An item over DynamoDB's limit is refused on every retry, and the StateTable stream shard
behind it would stall until its records expire: data loss. Validation bounds every input
the item is made of, so its size is bounded by the settings alone. The map function
measures each item (`aggregation.delta_items.fits_item_limit`) and splits a run whose
item would not fit; this bound proves the split always ends: the item of one record fits
whatever the input, for every hierarchy the settings accept (at most 15 levels).

The worst case, by the developer guide's rules (`aggregation.item_size`):

- fixed attributes (docs/architecture.md, "DeltaTable"): `StreamShard` (the stream
  label, 23 characters, `/`, a shard id of at most 65: at most 100 bytes),
  `FirstSequenceNumber` and `LastSequenceNumber` (at most 40 characters each),
  `BatchHash` (64 hex), `RecordCount`, `CreatedAt` and `ExpiresAt` (epoch seconds),
  `WrittenByRequestId` (36);
- `ProducerTimestamps`: one number of at most 38 significant digits per record;
- `Deltas`: per record at most 2 x levels nodes (the old and the new path of a trade
  that moves), all distinct, each keyed by a path of level values of at most
  `MAX_LEVEL_VALUE_BYTES` joined by `:`, holding a `Value` that sums at most 2 values
  per record (`ValueDomain.sum_digits`) and a `TradeCount` of at most the record count.

The guide calls its number sizes approximate, so every number is counted
`NUMBER_HEADROOM_BYTES` larger.
"""

from aggregation.delta_items import (
    BATCH_HASH,
    CREATED_AT,
    DELTAS,
    FIRST_SEQUENCE_NUMBER,
    LAST_SEQUENCE_NUMBER,
    PRODUCER_TIMESTAMPS,
    RECORD_COUNT,
    REQUEST_ID_BYTES,
    STREAM_SHARD,
    WRITTEN_BY_REQUEST_ID,
)
from aggregation.exact import DYNAMODB_MAX_DIGITS
from aggregation.hierarchy import KEY_SEPARATOR, MAX_LEVEL_VALUE_BYTES
from aggregation.item_size import LIST_OR_MAP_OVERHEAD_BYTES, MAX_ITEM_BYTES, number_bytes
from aggregation.names import EXPIRES_AT, NODE_TRADE_COUNT, NODE_VALUE
from aggregation.value_domain import ValueDomain

STREAM_SHARD_MAX_BYTES = 100
SEQUENCE_NUMBER_MAX_BYTES = 40
BATCH_HASH_BYTES = 64
EPOCH_SECONDS_MAX_DIGITS = 11
"""`CreatedAt` and `ExpiresAt` (now + at most 365 days) until the year 5138."""
NUMBER_HEADROOM_BYTES = 2

FIXED_STRING_ATTRIBUTES: dict[str, int] = {
    STREAM_SHARD: STREAM_SHARD_MAX_BYTES,
    FIRST_SEQUENCE_NUMBER: SEQUENCE_NUMBER_MAX_BYTES,
    LAST_SEQUENCE_NUMBER: SEQUENCE_NUMBER_MAX_BYTES,
    BATCH_HASH: BATCH_HASH_BYTES,
    WRITTEN_BY_REQUEST_ID: REQUEST_ID_BYTES,
}
"""Every string attribute of a delta item, with its longest value in bytes."""


def _number_bound(significant_digits: int) -> int:
    return number_bytes(significant_digits) + NUMBER_HEADROOM_BYTES


def _named_number(name: str, significant_digits: int) -> int:
    return len(name) + _number_bound(significant_digits)


def worst_case_delta_item_bytes(records: int, levels: int, domain: ValueDomain) -> int:
    """An upper bound of the size of the delta item of a map batch of `records` records."""
    count_digits = len(str(records))
    fixed = sum(len(name) + size for name, size in FIXED_STRING_ATTRIBUTES.items())
    fixed += _named_number(RECORD_COUNT, count_digits)
    fixed += _named_number(CREATED_AT, EPOCH_SECONDS_MAX_DIGITS) + _named_number(EXPIRES_AT, EPOCH_SECONDS_MAX_DIGITS)
    timestamps = len(PRODUCER_TIMESTAMPS) + LIST_OR_MAP_OVERHEAD_BYTES
    timestamps += records * (1 + _number_bound(DYNAMODB_MAX_DIGITS))
    node_body = (
        LIST_OR_MAP_OVERHEAD_BYTES
        + (1 + _named_number(NODE_VALUE, domain.sum_digits(2 * records)))
        + (1 + _named_number(NODE_TRADE_COUNT, count_digits))
    )
    path_key_bytes = sum(
        depth * MAX_LEVEL_VALUE_BYTES + (depth - 1) * len(KEY_SEPARATOR) for depth in range(1, levels + 1)
    )
    per_path = levels * (1 + node_body) + path_key_bytes  # one map element per node, plus its key
    deltas = len(DELTAS) + LIST_OR_MAP_OVERHEAD_BYTES + records * 2 * per_path
    return fixed + timestamps + deltas


def max_records_per_delta_item(levels: int, domain: ValueDomain, limit: int = MAX_ITEM_BYTES) -> int:
    """The largest map batch whose worst-case delta item fits `limit` (0 if not even one record)."""
    fits, too_many = 0, 1
    while worst_case_delta_item_bytes(too_many, levels, domain) <= limit:
        fits, too_many = too_many, too_many * 2
    while too_many - fits > 1:
        middle = (fits + too_many) // 2
        if worst_case_delta_item_bytes(middle, levels, domain) <= limit:
            fits = middle
        else:
            too_many = middle
    return fits
