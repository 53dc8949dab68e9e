"""`producer send`'s read-back on AWS: CloudWatch's figures of what reduce published, in the
emulator (whose GetMetricData answers percentiles: `moto_compat.fix_cloudwatch_percentile_statistics`).

Reduce publishes through EMF, which only CloudWatch Logs turns into metrics; here the same
data points are put directly (`MessagesApplied` and `EndToEndLatency`, service `reduce`, at
1-second resolution), as CloudWatch would hold them: the stack's, and another stack's in the
same account and region under its own namespace, which the figures must leave out.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import boto3
import pytest

from aggregation.names import END_TO_END_LATENCY, MESSAGES_APPLIED, REDUCE_SERVICE, stack_metrics_namespace
from local.emulator.control import EmulatorProcess
from producer.watch import CloudWatchReader

pytestmark = pytest.mark.emulator

NAMESPACE = stack_metrics_namespace("Production")
OTHER_STACKS_NAMESPACE = stack_metrics_namespace("Staging")


def publish(
    client: Any, when: dt.datetime, applied: int, latencies_ms: dict[float, int], namespace: str = NAMESPACE
) -> None:
    dimensions = [{"Name": "service", "Value": REDUCE_SERVICE}]
    client.put_metric_data(
        Namespace=namespace,
        MetricData=[
            {
                "MetricName": MESSAGES_APPLIED,
                "Dimensions": dimensions,
                "Timestamp": when,
                "Value": applied,
                "Unit": "Count",
                "StorageResolution": 1,
            },
            {
                "MetricName": END_TO_END_LATENCY,
                "Dimensions": dimensions,
                "Timestamp": when,
                "Values": list(latencies_ms),
                "Counts": list(latencies_ms.values()),
                "Unit": "Milliseconds",
                "StorageResolution": 1,
            },
        ],
    )


def test_the_reader_follows_the_latest_period_live_and_the_whole_run_at_the_end(emulator: EmulatorProcess) -> None:
    client = boto3.client(
        "cloudwatch",
        endpoint_url=emulator.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    start = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0) - dt.timedelta(minutes=5)
    clock = [start]
    reader = CloudWatchReader(client, NAMESPACE, now=lambda: clock[0])
    publish(client, start + dt.timedelta(seconds=12), 100, {float(ms): 1 for ms in range(1, 101)})
    publish(client, start + dt.timedelta(seconds=25), 50, {1000.0: 50})
    # Another stack's reducers, same names and dimension: none of it is this stack's.
    publish(client, start + dt.timedelta(seconds=25), 7, {60_000.0: 7}, OTHER_STACKS_NAMESPACE)
    clock[0] = start + dt.timedelta(seconds=30)

    live = reader.sample()
    assert (live.applied, live.rate) == (150, 5.0)  # the latest 10-s period: 50 messages
    assert live.p50_ms == live.p99_ms == live.max_ms == 1000.0

    run = reader.summary()
    assert run.applied == 150
    assert run.rate == 150 / 20  # two busy 10-s periods
    assert (run.p50_ms, run.p99_ms, run.max_ms) == (75.0, 1000.0, 1000.0)
