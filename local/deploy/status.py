"""`make status`: per-function counters and per-shard lag of the running local pipeline, and an
`ALARM` line for each function that lost records (`alarms`: expired or retries spent).

Reads `.local/runner-stats.json` (rewritten by the runner about once a second) and the
pid files; never talks to the runner, so it works from any shell, even mid-demo. Every name
read from there (functions, sources, shards, the endpoint) is shown as
`toolkit.untrusted.untrusted_text`: never parsed as markup, control characters escaped.
"""

from __future__ import annotations

import re
import time
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from aggregation.names import ARCHIVE_SERVICE, MAP_SERVICE, REDUCE_SERVICE, STATE_SERVICE
from local.deploy.lifecycle import running_state
from local.paths import LocalPaths
from local.runner.stats import read_stats
from toolkit.untrusted import untrusted_text

_CDK_PHYSICAL_NAME = re.compile(r"^[^-]+-(?P<logical>.+?)(?:[0-9A-F]{8})?-[0-9A-Z]{8,13}$")

#: The functions in pipeline order, by the names a user knows them (their Powertools service).
SERVICES = (STATE_SERVICE, MAP_SERVICE, REDUCE_SERVICE, ARCHIVE_SERVICE)

#: The counters of the functions table: (row label, counter, shown red when non-zero).
COUNTERS = (
    ("calls", "invocations", False),
    ("errors", "errors", True),
    ("timeouts", "timeouts", False),
    ("retries", "retries", False),
    ("records", "records_processed", False),
    ("filtered", "records_filtered", False),
    ("batches skipped", "batches_skipped", True),
    ("records dropped", "records_dropped", True),
    ("cold starts", "cold_starts", False),
    ("busy now", "in_flight", False),
)


def _logical(physical_name: str) -> str:
    """`Stack-StateStateFunction0F6F2F32-VHU11YYYDZBK` -> `StateStateFunction`."""
    match = _CDK_PHYSICAL_NAME.match(physical_name)
    return match.group("logical") if match else physical_name


def function_name(physical_name: str) -> str:
    """The function's name as the docs say it (`state`, `map`, `reduce`, `archive`), not CloudFormation's.

    A function's logical id starts with its construct's, which is its stage (`MapMapFunction`);
    anything else keeps its logical id.
    """
    logical = _logical(physical_name)
    return next((service for service in SERVICES if logical.lower().startswith(service)), logical)


def source_name(kind: str, physical_name: str) -> str:
    """`ingest stream`, `state table`, `delta table`: the source's logical id in words."""
    logical = _logical(physical_name).removeprefix("Tables")
    words = re.findall(r"[A-Z][a-z0-9]*|[a-z0-9]+", logical)
    return " ".join(word.lower() for word in words) or kind


def _pipeline_order(name: str) -> tuple[int, str]:
    return (SERVICES.index(name) if name in SERVICES else len(SERVICES), name)


def functions_table(stats: dict[str, Any]) -> Table:
    """One column per function, one row per counter: four functions fit 80 columns however large the counts."""
    functions = {function_name(name): counters for name, counters in stats.get("functions", {}).items()}
    names = sorted(functions, key=_pipeline_order)
    table = Table(title="functions", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0, 0, 1))
    table.add_column("", no_wrap=True)
    for name in names:
        table.add_column(untrusted_text(name), justify="right", no_wrap=True)
    for label, counter, alarming in COUNTERS:
        cells = []
        for name in names:
            count = int(functions[name].get(counter, 0))
            cells.append(Text(f"{count:,d}", style="bold red" if alarming and count else ""))
        table.add_row(Text(label), *cells)
    return table


def shards_table(stats: dict[str, Any]) -> Table:
    """Per shard of each event source: records read, read but not yet checkpointed, and how far behind
    (the checkpoint itself is in `runner-stats.json`: a sequence number tells a user nothing)."""
    table = Table(
        title="iterator lag per shard", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0, 0, 2)
    )
    for column in ("function", "source", "shard", "read", "pending", "ms behind"):
        numeric = column in ("read", "pending", "ms behind")
        table.add_column(column, justify="right" if numeric else "left", no_wrap=True)
    shards = sorted(stats.get("shards", []), key=lambda shard: _pipeline_order(function_name(shard["function"])))
    for shard in shards:
        table.add_row(
            untrusted_text(function_name(shard["function"])),
            untrusted_text(source_name(shard["source"], shard["source_name"])),
            untrusted_text(shard["shard_id"][-8:]),
            f"{shard['records_read']:,d}",
            f"{shard['records_pending']:,d}",
            f"{shard['ms_behind']:,d}",
        )
    return table


def alarms(stats: dict[str, Any]) -> list[Text]:
    """One line per function whose records were lost: the local stand-in of an alarm on Lambda's
    `DroppedEventCount` (a batch discarded after its retries or its records' expiry), on
    `DestinationDeliveryFailures` (its invocation record not delivered), and on a mapping whose
    position the stream trimmed before it read on. Each names where the runner's log says more."""
    lines = []
    functions = {function_name(name): counters for name, counters in stats.get("functions", {}).items()}
    for name in sorted(functions, key=_pipeline_order):
        counters = functions[name]
        dropped = int(counters.get("records_dropped", 0))
        undelivered = int(counters.get("destination_delivery_failures", 0))
        unread = int(counters.get("unread_records_trimmed", 0))
        if not (dropped or undelivered or unread):
            continue
        what = []
        if dropped:
            what.append(f"{dropped:,d} record(s) dropped (expired, or retries spent)")
        if unread:
            what.append(f"records trimmed before they were read ({unread:,d} time(s))")
        if undelivered:
            what.append(f"{undelivered:,d} not sent to the on-failure destination")
        detail = f": {'; '.join(what)}; LOST in runner.log"
        lines.append(Text.assemble(("ALARM ", "bold red"), untrusted_text(name), detail))
    return lines


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
    for line in alarms(stats):
        console.print(line)
    console.print(functions_table(stats))
    console.print(shards_table(stats))
    return 0 if state.complete else 1
