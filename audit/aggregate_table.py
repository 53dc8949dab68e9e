"""Reading the aggregate table: node totals (the sums of their slices), and the `#` bookkeeping items apart."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from boto3.dynamodb.types import TypeDeserializer

from aggregation.aggregate_items import combined_stats, is_stats_key, node_path_of, sum_node_slices
from aggregation.deltas import NodeDelta
from aggregation.names import AGGREGATE_KEY, NODE_TRADE_COUNT, NODE_VALUE

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

_deserializer = TypeDeserializer()


@dataclass
class AggregateTableContents:
    nodes: dict[str, NodeDelta] = field(default_factory=dict)
    """Per node path, the sum of its slices."""
    node_item_keys: list[str] = field(default_factory=list)
    """Every item holding a slice of a node (`aggregation.aggregate_items`)."""
    stats: dict[str, Any] | None = None
    """Every stats slice as one (`aggregation.aggregate_items.combined_stats`)."""
    stats_item_keys: list[str] = field(default_factory=list)
    bookkeeping_keys: list[str] = field(default_factory=list)


def read_aggregate_table(dynamodb: DynamoDBClient, table: str) -> AggregateTableContents:
    """Every item of the table, with a consistent read of each page."""
    contents = AggregateTableContents()
    slices: list[tuple[str, Decimal, int]] = []
    stats_slices: list[dict[str, Any]] = []
    for page in dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        for raw in page["Items"]:
            item = {name: _deserializer.deserialize(value) for name, value in raw.items()}
            key = str(item[AGGREGATE_KEY])
            if is_stats_key(key):
                stats_slices.append(item)
                contents.stats_item_keys.append(key)
            elif node_path_of(key) is None:
                contents.bookkeeping_keys.append(key)
            else:
                contents.node_item_keys.append(key)
                slices.append((key, Decimal(item.get(NODE_VALUE, 0)), int(item.get(NODE_TRADE_COUNT, 0))))
    contents.nodes = sum_node_slices(slices)
    contents.stats = combined_stats(stats_slices)
    return contents
