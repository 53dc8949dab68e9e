"""Many values of one metric, published as EMF documents of at most 100 values each.

Why not one Powertools `add_metric` per value: that call formats the metric's whole value list
into a debug message every time (whether or not debug logging is on), so each value costs time
growing with the values before it in its document. For the reduce function's `EndToEndLatency`,
one value per message, that was the largest part of its CPU per message (docs/benchmarks.md,
section 3). The documents here are Powertools' own (`Metrics.serialize_metric_set`: the
namespace, the `service` dimension, the timestamp), printed as `flush_metrics` prints them, and
carry what as many `add_metric` calls would have carried: every value, as a float, at most
`MAX_VALUES_PER_DOCUMENT` to a document.
"""

import json
from collections.abc import Sequence

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricResolution, MetricUnit
from aws_lambda_powertools.metrics.functions import is_metrics_disabled

MAX_VALUES_PER_DOCUMENT = 100
"""CloudWatch's limit of values of one metric in one EMF document (Powertools' `MAX_METRICS`)."""


def publish_metric_values(
    metrics: Metrics, *, name: str, unit: MetricUnit, resolution: MetricResolution, values: Sequence[float]
) -> None:
    """Print `values` of metric `name` now, in documents of `MAX_VALUES_PER_DOCUMENT`, with
    `metrics`' namespace and dimensions; nothing when there are none or metrics are disabled
    (`POWERTOOLS_METRICS_DISABLED`, as Powertools honours it)."""
    if is_metrics_disabled():
        return
    for start in range(0, len(values), MAX_VALUES_PER_DOCUMENT):
        chunk = [float(value) for value in values[start : start + MAX_VALUES_PER_DOCUMENT]]
        document = metrics.serialize_metric_set(
            metrics={name: {"Unit": unit.value, "StorageResolution": resolution.value, "Value": chunk}}
        )
        print(json.dumps(document, separators=(",", ":")))
