"""`publish_metric_values` prints what one Powertools `add_metric` per value would have: every
value in order, at most 100 to a document, under the same namespace, service and unit."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from contextlib import redirect_stdout
from typing import Any

import pytest
from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricResolution, MetricUnit
from hypothesis import given, settings
from hypothesis import strategies as st

from function_support.metrics import publish_metric_values

NAMESPACE = "MetricsTest"


def documents(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def printed_documents(publish: Callable[[], None]) -> list[dict[str, Any]]:
    with redirect_stdout(io.StringIO()) as out:
        publish()
    return documents(out.getvalue())


def without_timestamp(document: dict[str, Any]) -> dict[str, Any]:
    return {**document, "_aws": {**document["_aws"], "Timestamp": None}}


def powertools_documents(values: list[int]) -> list[dict[str, Any]]:
    """The ground truth: Powertools' own documents for one `add_metric` per value."""
    metrics = Metrics(namespace=NAMESPACE, service="truth")

    def publish() -> None:
        for value in values:
            metrics.add_metric(
                name="Latency", unit=MetricUnit.Milliseconds, value=value, resolution=MetricResolution.High
            )
        if metrics.metric_set:
            metrics.flush_metrics()

    return printed_documents(publish)


EMF_LIMIT = 100
"""CloudWatch's limit of values of one metric in one EMF document, and Powertools' flush point."""
LENGTHS = st.sampled_from([0, 1, EMF_LIMIT - 1, EMF_LIMIT, EMF_LIMIT + 1, 2 * EMF_LIMIT + 50])


@settings(max_examples=30, deadline=None)
@given(LENGTHS.flatmap(lambda n: st.lists(st.integers(min_value=-5, max_value=10**7), min_size=n, max_size=n)))
def test_the_documents_are_powertools_own_for_the_same_values(values: list[int]) -> None:
    expected = powertools_documents(values)
    metrics = Metrics(namespace=NAMESPACE, service="truth")

    published = printed_documents(
        lambda: publish_metric_values(
            metrics, name="Latency", unit=MetricUnit.Milliseconds, resolution=MetricResolution.High, values=values
        )
    )
    assert [without_timestamp(d) for d in published] == [without_timestamp(d) for d in expected]
    assert [value for d in published for value in d["Latency"]] == [float(value) for value in values]
    assert all(len(d["Latency"]) <= EMF_LIMIT for d in published)


def test_nothing_is_printed_when_metrics_are_disabled(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    publish_metric_values(
        Metrics(namespace=NAMESPACE, service="off"),
        name="Latency",
        unit=MetricUnit.Milliseconds,
        resolution=MetricResolution.High,
        values=[1, 2, 3],
    )
    assert documents(capsys.readouterr().out) == []
