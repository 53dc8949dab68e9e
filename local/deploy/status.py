"""`make status`: per-function counters and per-shard lag of the running local pipeline.

Reads `.local/runner-stats.json` (rewritten by the runner about once a second) and the
pid files; never talks to the runner, so it works from any shell, even mid-demo. Every name
read from there (functions, sources, shards, the endpoint) is shown as
`toolkit.untrusted.untrusted_text`: never parsed as markup, control characters escaped.
"""

from __future__ import annotations

import re
import time
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from local.deploy.lifecycle import running_state
from local.paths import LocalPaths
from local.runner.stats import read_stats
from toolkit.untrusted import untrusted_text

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
            untrusted_text(_short(name)),
            _count(counters["invocations"]),
            _count(counters["errors"], "red"),
            _count(counters["timeouts"]),
            _count(counters["retries"]),
            _count(counters["records_processed"]),
            _count(counters["records_filtered"]),
            _count(counters["batches_skipped"], "bold red"),
            _count(counters["cold_starts"]),
            _count(counters["in_flight"]),
        )
    return table


def _count(value: object, alarming: str = "") -> Text:
    """A counter as text, in the ``alarming`` style when it is not zero."""
    return untrusted_text(str(value), alarming if value else "")


def shards_table(stats: dict[str, Any]) -> Table:
    table = Table(title="iterator lag per shard", title_justify="left")
    for column in ("function", "source", "shard", "read", "behind", "ms behind", "checkpoint"):
        table.add_column(column, justify="right" if column in ("read", "behind", "ms behind") else "left")
    for shard in stats.get("shards", []):
        table.add_row(
            untrusted_text(_short(shard["function"])),
            untrusted_text(f"{shard['source']}:{_short(shard['source_name'])}"),
            untrusted_text(shard["shard_id"][-8:]),
            _count(shard["records_read"]),
            _count(shard["records_pending"]),
            _count(shard["ms_behind"]),
            untrusted_text("…" + shard["checkpoint"][-8:] if shard["checkpoint"] else "-"),
        )
    return table


def render_status(paths: LocalPaths, console: Console) -> int:
    """Print the status; 0 when the runtime is up, 1 when it is not."""
    state = running_state(paths)
    stats = read_stats(paths.runner_stats)
    if state.emulator is None and state.runner_pid is None:
        console.print(Text.assemble(("the local runtime is not running", "yellow"), " (start it with `make up`)"))
        return 1
    not_running = Text("not running", style="red")
    emulator = untrusted_text(state.emulator.endpoint_url) if state.emulator else not_running
    runner = Text(f"pid {state.runner_pid}") if state.runner_pid else not_running
    console.print(Text.assemble("emulator: ", emulator, "   runner: ", runner))
    if stats is None:
        console.print("no runner statistics yet")
        return 0 if state.complete else 1
    age = time.time() - float(stats.get("updated_at", 0))
    console.print(Text.assemble(f"statistics updated {age:.1f} s ago", (" (stale)" if age > 5 else "", "red")))
    console.print(functions_table(stats))
    console.print(shards_table(stats))
    return 0 if state.complete else 1
