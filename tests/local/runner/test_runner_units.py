"""The runner's pure parts: event filter patterns, event shapes, checkpoints, field resolution."""

from __future__ import annotations

import base64
import datetime
import json
import os
from pathlib import Path
from typing import Any

import pytest

from local.runner import events
from local.runner.checkpoints import CheckpointStore
from local.runner.discovery import FunctionConfig, _resolve_field
from local.runner.execution_environment import ExecutionEnvironment
from local.runner.filters import UnsupportedFilterError, check_patterns, record_matches
from local.runner.invoker import FunctionInvoker, fault_injection_overrides
from local.runner.stats import RunnerStats


def kinesis(data: Any) -> dict[str, Any]:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return {"kinesis": {"data": base64.b64encode(raw).decode(), "partitionKey": "k"}, "eventSource": "aws:kinesis"}


@pytest.mark.parametrize(
    ("pattern", "data", "matches"),
    [
        ({"data": {"kind": ["keep"]}}, {"kind": "keep"}, True),
        ({"data": {"kind": ["keep"]}}, {"kind": "drop"}, False),
        ({"data": {"kind": ["keep"]}}, b"not json", False),
        ({"data": {"kind": [{"prefix": "ke"}]}}, {"kind": "keep"}, True),
        ({"data": {"kind": [{"anything-but": ["drop"]}]}}, {"kind": "keep"}, True),
        ({"data": {"kind": [{"anything-but": "drop"}]}}, {"kind": "drop"}, False),
        ({"data": {"n": [{"numeric": [">", 0, "<=", 5]}]}}, {"n": 5}, True),
        ({"data": {"n": [{"numeric": [">", 0, "<=", 5]}]}}, {"n": 6}, False),
        ({"data": {"n": [{"numeric": [">", 0]}]}}, {"n": "1"}, False),
        ({"data": {"n": [{"exists": True}]}}, {"n": None}, True),
        ({"data": {"n": [{"exists": False}]}}, {"m": 1}, True),
        ({"data": {"n": [{"exists": False}]}}, {"n": 1}, False),
        ({"data": {"a": {"b": [1]}}}, {"a": {"b": 1}}, True),
        ({"data": {"flag": [True]}}, {"flag": 1}, False),
        ({"data": {"tags": ["x"]}}, {"tags": ["y", "x"]}, True),
    ],
)
def test_kinesis_filter_patterns(pattern: dict[str, Any], data: Any, matches: bool) -> None:
    assert record_matches(kinesis(data), [pattern]) is matches


def test_filters_are_ored_and_no_filter_passes_everything() -> None:
    record = {"eventName": "MODIFY", "dynamodb": {"Keys": {"pk": {"S": "a"}}}}
    assert record_matches(record, [])
    assert not record_matches(record, [{"dynamodb": {"Keys": {"pk": {"S": ["b"]}}}}])
    assert record_matches(
        record, [{"dynamodb": {"Keys": {"pk": {"S": ["b"]}}}}, {"dynamodb": {"Keys": {"pk": {"S": ["a"]}}}}]
    )


NEW_DELTA_ITEMS = {"dynamodb": {"NewImage": {"BatchHash": {"S": [{"exists": True}]}}}}
"""The reduce and archive mappings' pattern (tests/stacks/test_stack_event_sources.py checks the template)."""


def delta_stream_record(event_name: str, *, new: bool, old: bool) -> dict[str, Any]:
    """A DeltaTable stream record as the runner builds it from `get_records` (NEW_AND_OLD_IMAGES view)."""
    image = {"BatchHash": {"S": "ab12"}, "RecordCount": {"N": "3"}}
    change: dict[str, Any] = {"Keys": {"BatchHash": {"S": "ab12"}}, "SequenceNumber": "100", "SizeBytes": 60}
    change |= {"NewImage": image} if new else {}
    change |= {"OldImage": image} if old else {}
    change["StreamViewType"] = "NEW_AND_OLD_IMAGES"
    raw = {"eventID": "e1", "eventName": event_name, "dynamodb": change}
    return events.dynamodb_record(raw, stream_arn="arn:aws:dynamodb:us-east-1:1:table/t/stream/s", region="us-east-1")


@pytest.mark.parametrize(
    ("event_name", "new", "old", "delivered"),
    [
        ("INSERT", True, False, True),
        # A MODIFY has a new image too: the filter passes it, and the handlers skip it by eventName.
        ("MODIFY", True, True, True),
        # A TTL expiry or delete has only the old image: filtered out.
        ("REMOVE", False, True, False),
    ],
)
def test_the_new_delta_items_filter_applies_to_records_as_the_runner_builds_them(
    event_name: str, new: bool, old: bool, delivered: bool
) -> None:
    assert record_matches(delta_stream_record(event_name, new=new, old=old), [NEW_DELTA_ITEMS]) is delivered


def test_exists_sees_leaf_values_only_as_lambda_documents() -> None:
    insert = delta_stream_record("INSERT", new=True, old=False)
    # The attribute's value is an object ({"S": ...}): `exists` does not see it without the type.
    assert not record_matches(insert, [{"dynamodb": {"NewImage": {"BatchHash": [{"exists": True}]}}}])
    assert record_matches(insert, [{"dynamodb": {"NewImage": {"BatchHash": [{"exists": False}]}}}])
    assert not record_matches(insert, [{"dynamodb": {"NewImage": {"BatchHash": {"S": [{"exists": False}]}}}}])
    assert not record_matches(insert, [{"dynamodb": {"NewImage": {"BatchHash": {"N": [{"exists": True}]}}}}])


def test_dynamodb_mappings_filter_only_on_the_dynamodb_key() -> None:
    check_patterns("dynamodb", [NEW_DELTA_ITEMS])
    check_patterns("kinesis", [{"data": {"kind": ["keep"]}}, {"partitionKey": ["k"]}])
    with pytest.raises(UnsupportedFilterError, match=r"names \['eventName'\]: Lambda filters dynamodb"):
        check_patterns("dynamodb", [NEW_DELTA_ITEMS, {"eventName": ["INSERT"]}])


def test_kinesis_record_has_the_lambda_shape() -> None:
    arrived = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    record = events.kinesis_record(
        {"SequenceNumber": "42", "ApproximateArrivalTimestamp": arrived, "Data": b"hi", "PartitionKey": "p"},
        shard_id="shardId-000000000000",
        stream_arn="arn:aws:kinesis:us-east-1:1:stream/s",
        region="us-east-1",
    )
    assert record["eventID"] == "shardId-000000000000:42"
    assert record["kinesis"]["data"] == base64.b64encode(b"hi").decode()
    assert record["kinesis"]["approximateArrivalTimestamp"] == arrived.timestamp()
    assert events.sequence_number_of(record) == "42"


def test_checkpoints_survive_a_new_store_and_leave_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "checkpoints.json"
    store = CheckpointStore(path)
    store.commit("mapping", "shard-1", "10")
    store.commit("mapping", "shard-1", "20")
    assert CheckpointStore(path).get("mapping", "shard-1") == "20"
    assert CheckpointStore(path).get("mapping", "shard-2") is None
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoints.json"]


def test_mapping_fields_come_from_the_emulator_then_the_template_then_lambda_defaults() -> None:
    api = {"BatchSize": 10}
    template = {"BatchSize": 99, "MaximumBatchingWindowInSeconds": 2}
    assert _resolve_field("BatchSize", api, template) == (10, "emulator")
    assert _resolve_field("MaximumBatchingWindowInSeconds", api, template) == (2, "template")
    assert _resolve_field("MaximumRetryAttempts", api, template) == (-1, "default")


def test_only_fault_injection_variables_override_the_function_environment() -> None:
    environ = {"FAILURE_MAP_LAMBDA_PCT": "2", "FAILURE_X": "1", "PATH": "/bin", "MY_PCT": "3"}
    assert fault_injection_overrides(environ) == {"FAILURE_MAP_LAMBDA_PCT": "2"}


def test_an_invocation_the_runner_fails_on_is_killed_so_a_resend_cannot_overlap_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error of the runner's own mid-invocation (here: reading the reply) leaves the worker still
    running the event; the invoker kills it before the error reaches the lane, so a batch sent again
    never runs beside it, and the next invocation is a cold start."""
    (tmp_path / "slow.py").write_text("import time\n\ndef handler(event, context):\n    time.sleep(30)\n")
    function = FunctionConfig(
        name="slow",
        arn="arn:aws:lambda:us-east-1:1:function:slow",
        handler="slow.handler",
        environment={},
        timeout_seconds=60,
        memory_mb=128,
        reserved_concurrency=1,
        code_sha256="",
        code_dir=tmp_path,
    )
    invoker = FunctionInvoker(function, environment={}, stats=RunnerStats(None))
    invoker.warm_up()
    [environment] = invoker._all
    worker = environment.pid
    assert worker is not None

    def broken_read(*_: Any, **__: Any) -> str | None:
        raise ValueError("the runner's own bug")

    monkeypatch.setattr(ExecutionEnvironment, "_read_line", broken_read)
    try:
        with pytest.raises(ValueError, match="own bug"):
            invoker.invoke({"Records": []})
        with pytest.raises(ProcessLookupError):
            os.kill(worker, 0)  # killed and reaped: the event runs no more
        assert environment not in invoker._all and environment not in invoker._idle
    finally:
        invoker.shutdown()
