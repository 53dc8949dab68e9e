"""What every benchmark shares: the emulator, scratch tables, the handlers' environment, the machine.

The handlers are driven through `local.runner.inprocess.Pipeline` (the driver the tests use too,
which reads the emulator's real DynamoDB streams), so the benchmarks exercise exactly the
code paths the tests prove correct.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import platform
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from function_support import aws
from local.emulator.control import EmulatorProcess, start_emulator
from local.runner import inprocess
from local.runner.inprocess import Pipeline
from map_function import handler as map_handler
from reduce_function import handler as reduce_handler
from state_function import handler as state_handler

DUMMY_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "benchmark",
    "AWS_SECRET_ACCESS_KEY": "benchmark",
    "AWS_SESSION_TOKEN": "benchmark",
    "AWS_DEFAULT_REGION": "us-east-1",
}
HANDLER_MODULES = (state_handler, map_handler, reduce_handler)


@dataclass(frozen=True)
class Machine:
    """Where and when the figures were measured."""

    cpu_model: str
    cpus: int
    python: str
    platform: str
    measured_at: str
    load_average: tuple[float, float, float]


def describe_machine() -> Machine:
    model = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return Machine(
        cpu_model=model,
        cpus=os.cpu_count() or 1,
        python=platform.python_version(),
        platform=platform.platform(terse=True),
        measured_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        load_average=os.getloadavg(),
    )


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (no interpolation: every reported figure is a measured one)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, math.ceil(round(fraction * len(ordered), 9)))
    return ordered[min(rank, len(ordered)) - 1]


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the duration, restoring the previous values."""
    previous = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class _Discard(io.TextIOBase):
    def write(self, text: str) -> int:
        return len(text)


@contextlib.contextmanager
def quiet_handlers() -> Iterator[None]:
    """Keep the handlers' log lines and EMF metrics off the terminal, not their cost.

    Powertools still formats every line and metric document (real work in Lambda too);
    only the final write goes nowhere.
    """
    sink = _Discard()
    streams: list[tuple[Any, Any]] = []
    for module in HANDLER_MODULES:
        handler = module.logger.registered_handler
        if hasattr(handler, "setStream"):
            streams.append((handler, handler.setStream(sink)))
    try:
        with contextlib.redirect_stdout(sink):
            yield
    finally:
        for handler, stream in streams:
            handler.setStream(stream)


@contextlib.contextmanager
def running_emulator(log_path: Path) -> Iterator[EmulatorProcess]:
    """A fresh emulator of our own for the duration, clients pointed at it."""
    emulator = start_emulator(log_path)
    try:
        with environment({**DUMMY_CREDENTIALS, "AWS_ENDPOINT_URL": emulator.endpoint_url}):
            aws.dynamodb_client.cache_clear()
            aws.state_update_client.cache_clear()
            aws.prevalidated_write_client.cache_clear()
            yield emulator
    finally:
        aws.dynamodb_client.cache_clear()
        aws.state_update_client.cache_clear()
        aws.prevalidated_write_client.cache_clear()
        emulator.stop()


def create_pipeline_tables(
    aggregate_tables: Sequence[str] = ("aggregate",), extra_delta_tables: Sequence[str] = ()
) -> dict[str, str]:
    """Scratch tables shaped like the stack's, named ``bench-<role>-<suffix>``; returns role -> name."""
    return inprocess.create_pipeline_tables("bench-", aggregate_tables, extra_delta_tables)


def handler_environment(names: dict[str, str], aggregate_role: str = "aggregate") -> dict[str, str]:
    return inprocess.handler_environment(names, "benchmark", aggregate_role)


def pipeline_for(names: dict[str, str], aggregate_role: str = "aggregate") -> Pipeline:
    """The in-process Pipeline on our tables (its `aggregates()` reads `aggregate_role`)."""
    return Pipeline({**names, "aggregate": names[aggregate_role]})


def all_stream_records(pipeline: Pipeline, table: str) -> list[dict[str, Any]]:
    """Every record the table's stream gained since the last read (the helper reads one page per call)."""
    records: list[dict[str, Any]] = []
    while page := pipeline.new_stream_records(table):
        records.extend(page)
    return records


def chunks(items: Sequence[Any], size: int) -> list[list[Any]]:
    return [list(items[start : start + size]) for start in range(0, len(items), size)]


def elapsed_since(started: float) -> float:
    return time.perf_counter() - started
