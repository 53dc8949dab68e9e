"""`make status`: per-function counters and per-shard lag of the running local pipeline.

Reads `.local/runner-stats.json` (rewritten by the runner about once a second) and the
pid files; never talks to the runner, so it works from any shell, even mid-demo.
"""

from __future__ import annotations

import re
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from local.deploy.lifecycle import running_state
from local.paths import LocalPaths
from local.runner.stats import read_stats

_CDK_PHYSICAL_NAME = re.compile(r"^[^-]+-(?P<logical>.+?)(?:[0-9A-F]{8})?-[0-9A-Z]{8,13}$")


def _short(physical_name: str) -> str:
    """`Stack-StateStateFunction0F6F2F32-VHU11YYYDZBK` -> `StateStateFunction` (fits 80 columns)."""
    match = _CDK_PHYSICAL_NAME.match(physical_name)
    return match.group("logical") if match else physical_name


def functions_table(stats: dict[str, Any]) -> Table:
    table = Table(title="functions", title_justify="left")
    for column in (
        "function",
        "calls",
        "errors",
        "timeouts",
        "retries",
        "records",
        "filtered",
        "skipped",
        "cold",
        "busy",
    ):
        table.add_column(column, justify="left" if column == "function" else "right")
    for name, counters in stats.get("functions", {}).items():
        table.add_row(
            _short(name),
            str(counters["invocations"]),
            f"[red]{counters['errors']}[/]" if counters["errors"] else "0",
            str(counters["timeouts"]),
            str(counters["retries"]),
            str(counters["records_processed"]),
            str(counters["records_filtered"]),
            f"[bold red]{counters['batches_skipped']}[/]" if counters["batches_skipped"] else "0",
            str(counters["cold_starts"]),
            str(counters["in_flight"]),
        )
    return table


def shards_table(stats: dict[str, Any]) -> Table:
    table = Table(title="iterator lag per shard", title_justify="left")
    for column in ("function", "source", "shard", "read", "behind", "ms behind", "checkpoint"):
        table.add_column(column, justify="right" if column in ("read", "behind", "ms behind") else "left")
    for shard in stats.get("shards", []):
        table.add_row(
            _short(shard["function"]),
            f"{shard['source']}:{_short(shard['source_name'])}",
            shard["shard_id"][-8:],
            str(shard["records_read"]),
            str(shard["records_pending"]),
            str(shard["ms_behind"]),
            "…" + shard["checkpoint"][-8:] if shard["checkpoint"] else "-",
        )
    return table


def render_status(paths: LocalPaths, console: Console) -> int:
    """Print the status; 0 when the runtime is up, 1 when it is not."""
    state = running_state(paths)
    stats = read_stats(paths.runner_stats)
    if state.emulator is None and state.runner_pid is None:
        console.print("[yellow]the local runtime is not running[/] (start it with `make up`)")
        return 1
    emulator = state.emulator.endpoint_url if state.emulator else "[red]not running[/]"
    runner = f"pid {state.runner_pid}" if state.runner_pid else "[red]not running[/]"
    console.print(f"emulator: {emulator}   runner: {runner}")
    if stats is None:
        console.print("no runner statistics yet")
        return 0 if state.complete else 1
    age = time.time() - float(stats.get("updated_at", 0))
    console.print(f"statistics updated {age:.1f} s ago" + (" [red](stale)[/]" if age > 5 else ""))
    console.print(functions_table(stats))
    console.print(shards_table(stats))
    return 0 if state.complete else 1
