"""The dated list-price table the cost figures come from, kept as data next to this module.

Why data and not constants: prices change and differ by region, so the table names its
sources and date, and a user can pass another file (`--prices`) without touching code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_PRICE_TABLE = Path(__file__).with_name("prices-us-east-1-2026-11.json")
SECONDS_PER_HOUR = 3600


@dataclass(frozen=True)
class StorageClassPrice:
    """An S3 storage class a lifecycle rule can move objects to, and how it bills small objects."""

    gb_month: float
    transition_request: float  # USD per object moved into the class
    minimum_object_bytes: int  # an object is billed at least this size
    standard_overhead_bytes: int  # per object, billed at S3 Standard's rate
    class_overhead_bytes: int  # per object, billed at this class's rate


@dataclass(frozen=True)
class PriceTable:
    region: str
    as_of: str
    notice: str
    hours_per_month: float
    dynamodb_write_unit: float  # USD per write request unit (on-demand)
    dynamodb_read_unit: float  # USD per read request unit (on-demand)
    dynamodb_write_capacity_unit_hour: float  # USD per provisioned write capacity unit and hour
    dynamodb_read_capacity_unit_hour: float  # USD per provisioned read capacity unit and hour
    kinesis_stream_hour: float
    kinesis_ingest_per_gb: float
    kinesis_retrieval_per_gb: float
    kinesis_shard_hour: float
    kinesis_put_payload_unit: float
    kinesis_record_increment_bytes: int
    kinesis_put_payload_unit_bytes: int
    lambda_gb_second: float
    lambda_request: float
    s3_standard_gb_month: float
    s3_put_request: float
    s3_get_request: float
    s3_storage_classes: tuple[tuple[str, StorageClassPrice], ...]
    """(name, price) pairs, not a dict, so that a price table is hashable: the planner's searches
    memoize plans by their inputs (`planner.scale_out`). `storage_class` looks one up."""
    sources: tuple[str, ...]
    logs_ingestion_per_gb: float
    custom_metric_month: float
    dashboard_month: float
    standard_alarm_month: float
    get_metric_data_per_metric: float
    kms_customer_managed_key_month: float

    @property
    def seconds_per_month(self) -> float:
        return self.hours_per_month * SECONDS_PER_HOUR

    def storage_class(self, name: str) -> StorageClassPrice:
        """The price of the S3 storage class `name` (one of `planner.inputs.ARCHIVE_STORAGE_CLASSES` but STANDARD)."""
        return dict(self.s3_storage_classes)[name]


def load_price_table(path: Path = DEFAULT_PRICE_TABLE) -> PriceTable:
    raw: dict[str, Any] = json.loads(path.read_text())
    dynamodb, kinesis, functions = raw["dynamodb"], raw["kinesis"], raw["lambda"]
    cloudwatch, kms, s3 = raw["cloudwatch"], raw["kms"], raw["s3"]
    return PriceTable(
        region=raw["region"],
        as_of=raw["as_of"],
        notice=raw["notice"],
        hours_per_month=float(raw["hours_per_month"]),
        dynamodb_write_unit=float(dynamodb["write_request_unit_per_million"]) / 1e6,
        dynamodb_read_unit=float(dynamodb["read_request_unit_per_million"]) / 1e6,
        dynamodb_write_capacity_unit_hour=float(dynamodb["provisioned_write_capacity_unit_hour"]),
        dynamodb_read_capacity_unit_hour=float(dynamodb["provisioned_read_capacity_unit_hour"]),
        kinesis_stream_hour=float(kinesis["on_demand_stream_hour"]),
        kinesis_ingest_per_gb=float(kinesis["on_demand_ingest_per_gb"]),
        kinesis_retrieval_per_gb=float(kinesis["on_demand_retrieval_per_gb"]),
        kinesis_shard_hour=float(kinesis["provisioned_shard_hour"]),
        kinesis_put_payload_unit=float(kinesis["provisioned_put_payload_units_per_million"]) / 1e6,
        kinesis_record_increment_bytes=int(kinesis["record_billing_increment_bytes"]),
        kinesis_put_payload_unit_bytes=int(kinesis["put_payload_unit_bytes"]),
        lambda_gb_second=float(functions["arm64_gb_second"]),
        lambda_request=float(functions["requests_per_million"]) / 1e6,
        s3_standard_gb_month=float(s3["standard_gb_month"]),
        s3_put_request=float(s3["put_requests_per_thousand"]) / 1e3,
        s3_get_request=float(s3["get_requests_per_thousand"]) / 1e3,
        s3_storage_classes=tuple(
            (
                name,
                StorageClassPrice(
                    gb_month=float(price["gb_month"]),
                    transition_request=float(price["transition_per_thousand"]) / 1e3,
                    minimum_object_bytes=int(price["minimum_object_bytes"]),
                    standard_overhead_bytes=int(price["standard_overhead_bytes"]),
                    class_overhead_bytes=int(price["class_overhead_bytes"]),
                ),
            )
            for name, price in s3["storage_classes"].items()
        ),
        sources=(
            dynamodb["source"],
            dynamodb["provisioned_source"],
            kinesis["source"],
            kinesis["provisioned_source"],
            functions["source"],
            cloudwatch["source"],
            kms["source"],
            s3["source"],
        ),
        logs_ingestion_per_gb=float(cloudwatch["logs_ingestion_per_gb"]),
        custom_metric_month=float(cloudwatch["custom_metric_month"]),
        dashboard_month=float(cloudwatch["dashboard_month"]),
        standard_alarm_month=float(cloudwatch["standard_alarm_month"]),
        get_metric_data_per_metric=float(cloudwatch["get_metric_data_per_thousand_metrics"]) / 1000,
        kms_customer_managed_key_month=float(kms["customer_managed_key_month"]),
    )
