"""Read what a handler's Powertools `Metrics` flushed: EMF documents, one JSON line each, on stdout."""

from __future__ import annotations

import json
from typing import Any


def emitted_metric(stdout: str, name: str) -> list[float]:
    """Every value of metric `name` in the EMF documents printed to `stdout`, in order."""
    values: list[float] = []
    for line in stdout.splitlines():
        if not line.startswith("{"):
            continue
        document: dict[str, Any] = json.loads(line)
        declared = {
            metric["Name"]
            for directive in document.get("_aws", {}).get("CloudWatchMetrics", [])
            for metric in directive["Metrics"]
        }
        if name in declared:
            value = document[name]
            values.extend(float(v) for v in (value if isinstance(value, list) else [value]))
    return values
