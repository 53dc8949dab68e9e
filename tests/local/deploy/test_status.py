"""`make status`: the names a user knows, every figure whole at 80 columns (a terminal's or a pipe's)."""

from __future__ import annotations

import re

from rich.console import Console

from local.deploy.status import alarms, functions_table, shards_table
from local.runner.stats import RunnerStats

STACK = "ExactlyOnceAggregation"
FUNCTIONS = {
    "state": f"{STACK}-StateStateFunction0F6F2F32-NP44UOYN3KX1",
    "map": f"{STACK}-MapMapFunction607F47A9-L6O8I80UUD6F",
    "reduce": f"{STACK}-ReduceReduceFunctionE8670AB2-BEWZ3DR80RXF",
    "archive": f"{STACK}-ArchiveFunctionAEA7E547-KNEO1KT60LD4",
}
SOURCES = {
    "state": ("kinesis", f"{STACK}-IngestStream404D06C0-7OX65F2L5BUH", "shardId-000000000000"),
    "map": ("dynamodb", f"{STACK}-TablesStateTableD41017F5-HRRBGSHGSMXY", "shardId-00000001541626099285-f35f62ef"),
    "reduce": ("dynamodb", f"{STACK}-TablesDeltaTable24D18C73-MQKFQAMWUDXM", "shardId-00000001541626099285-a1b2c3d4"),
}


def busy_runner() -> RunnerStats:
    """The runner's own counters, as large as a long load test makes them."""
    stats = RunnerStats(None)
    for index, (short, physical) in enumerate(FUNCTIONS.items()):
        counters = stats.function(physical)
        counters.invocations = 123_456_789 + index
        counters.errors = 12_345
        counters.records_processed = 9_876_543_210
        shard = SOURCES.get(short)
        if shard:
            kind, source, shard_id = shard
            state = stats.shard(
                f"{physical}/{shard_id}", function=physical, source=kind, source_name=source, shard_id=shard_id
            )
            state.records_read = 9_876_543_210
            state.records_pending = 1_234_567
            state.ms_behind = 86_400_000
    return stats


def test_status_names_the_functions_and_sources_as_users_know_them_and_fits_80_columns() -> None:
    console = Console(record=True, width=80, color_system=None)
    snapshot = busy_runner().snapshot()
    console.print(functions_table(snapshot))
    console.print(shards_table(snapshot))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "Function" not in text and STACK not in text  # no CloudFormation names
    assert re.search(r"^ *state +map +reduce +archive *$", text, re.MULTILINE)
    assert re.search(r"^ *calls +123,456,789 +123,456,790 +123,456,791 +123,456,792 *$", text, re.MULTILINE)
    assert re.search(r"^ *records( +9,876,543,210){4} *$", text, re.MULTILINE)
    for short, source in (("state", "ingest stream"), ("map", "state table"), ("reduce", "delta table")):
        assert re.search(rf"^ *{short} +{source} +\w{{8}} +9,876,543,210 +1,234,567 +86,400,000 *$", text, re.MULTILINE)


def test_status_raises_an_alarm_for_each_function_that_lost_records_and_none_otherwise() -> None:
    stats = busy_runner()
    assert alarms(stats.snapshot()) == []
    stats.function(FUNCTIONS["map"]).records_dropped = 12_345
    stats.function(FUNCTIONS["map"]).destination_delivery_failures = 2
    stats.function(FUNCTIONS["state"]).unread_records_trimmed = 1
    console = Console(record=True, width=80, color_system=None)
    for line in alarms(stats.snapshot()):
        console.print(line)
    console.print(functions_table(stats.snapshot()))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    words = " ".join(text.split())
    assert words.index("ALARM state:") < words.index("ALARM map:"), "in pipeline order, named as users know them"
    assert "ALARM map: 12,345 record(s) dropped (expired, or retries spent); 2 not sent to the on-failure" in words
    assert "ALARM state: records trimmed before they were read (1 time(s)); LOST in runner.log" in words
    assert re.search(r"^ *records dropped +0 +12,345 +0 +0 *$", text, re.MULTILINE)
