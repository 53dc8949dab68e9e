"""Reading the aggregate table: node totals, and the `#` bookkeeping items apart."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from boto3.dynamodb.types import TypeDeserializer

from aggregation.deltas import NodeDelta
from aggregation.names import AGGREGATE_KEY, BOOKKEEPING_PREFIX, NODE_TRADE_COUNT, NODE_VALUE, STATS_KEY

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

_deserializer = TypeDeserializer()


@dataclass
class AggregateTableContents:
    nodes: dict[str, NodeDelta] = field(default_factory=dict)
    stats: dict[str, Any] | None = None
    bookkeeping_keys: list[str] = field(default_factory=list)


def read_aggregate_table(dynamodb: DynamoDBClient, table: str) -> AggregateTableContents:
    """Every item of the table, with a consistent read of each page."""
    contents = AggregateTableContents()
    for page in dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        for raw in page["Items"]:
            item = {name: _deserializer.deserialize(value) for name, value in raw.items()}
            key = str(item[AGGREGATE_KEY])
            if key == STATS_KEY:
                contents.stats = item
            elif key.startswith(BOOKKEEPING_PREFIX):
                contents.bookkeeping_keys.append(key)
            else:
                contents.nodes[key] = NodeDelta(Decimal(item.get(NODE_VALUE, 0)), int(item.get(NODE_TRADE_COUNT, 0)))
    return contents
