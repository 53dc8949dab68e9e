"""A real moto server over HTTP, and a fresh stream and set of tables per test."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import pytest
from moto.server import ThreadedMotoServer

from aggregation.aggregate_items import node_item_key
from local.paths import LocalPaths
from producer.generator import GeneratorConfig, generate_messages
from producer.ledger import Ledger
from tests.producer.local_stack import started_local_stack
from toolkit.pipeline import PipelineTarget

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import AttributeValueTypeDef, KeySchemaElementTypeDef, WriteRequestTypeDef
    from mypy_boto3_kinesis import KinesisClient

REGION = "us-east-1"


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A moto server on a port the OS picks as it binds (a port probed first could be taken by then,
    by a parallel test worker say)."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(autouse=True)
def _aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dummy credentials; no endpoint leaking in from the caller's shell."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


def _create_table(client: DynamoDBClient, name: str, key: str, sort_key: str | None = None) -> None:
    keys: list[KeySchemaElementTypeDef] = [{"AttributeName": key, "KeyType": "HASH"}]
    if sort_key:
        keys.append({"AttributeName": sort_key, "KeyType": "RANGE"})
    client.create_table(
        TableName=name,
        KeySchema=keys,
        AttributeDefinitions=[{"AttributeName": k["AttributeName"], "AttributeType": "S"} for k in keys],
        BillingMode="PAY_PER_REQUEST",
    )


@pytest.fixture
def pipeline(moto_endpoint: str) -> PipelineTarget:
    """A stream and the four tables, named uniquely for this test, as PipelineTarget."""
    suffix = uuid.uuid4().hex[:8]
    target = PipelineTarget(
        stream_name=f"trades-{suffix}",
        state_table=f"state-{suffix}",
        aggregate_table=f"aggregate-{suffix}",
        delta_table=f"delta-{suffix}",
        quarantine=f"quarantine-{suffix}",
        region=REGION,
        endpoint_url=moto_endpoint,
        source="test",
    )
    kinesis: KinesisClient = boto3.client("kinesis", region_name=REGION, endpoint_url=moto_endpoint)
    kinesis.create_stream(StreamName=target.stream_name, ShardCount=2)
    dynamodb = target.dynamodb()
    _create_table(dynamodb, target.state_table, "TradeID")
    _create_table(dynamodb, target.aggregate_table, "AggregateKey")
    _create_table(dynamodb, target.delta_table, "StreamShard", sort_key="FirstSequenceNumber")
    _create_table(dynamodb, target.quarantine, "RecordId")
    return target


@pytest.fixture
def fill_tables() -> Callable[[PipelineTarget, Ledger], None]:
    """Writes the tables an exact pipeline would leave behind for a ledger."""
    return write_pipeline_result


def write_pipeline_result(target: PipelineTarget, ledger: Ledger) -> None:
    """Fill the state and aggregate tables as an exact pipeline would have, straight from a ledger."""
    client = target.dynamodb()
    requests: dict[str, list[WriteRequestTypeDef]] = {target.state_table: [], target.aggregate_table: []}
    for trade_id, state in ledger.trades.items():
        item: dict[str, AttributeValueTypeDef] = {
            "TradeID": {"S": trade_id},
            "Version": {"N": str(state.version)},
            "Value": {"N": str(state.value)},
            "Timestamp": {"N": "1700000000.5"},
            "Hierarchy": {
                "M": {
                    level: {"S": value} for level, value in zip(ledger.hierarchy_levels, state.hierarchy, strict=True)
                }
            },
        }
        requests[target.state_table].append({"PutRequest": {"Item": item}})
    for key, node in ledger.aggregates().items():
        requests[target.aggregate_table].append(
            {
                "PutRequest": {
                    "Item": {
                        "AggregateKey": {"S": node_item_key(key)},
                        "Value": {"N": str(node.value)},
                        "TradeCount": {"N": str(node.trade_count)},
                    }
                }
            }
        )
    bookkeeping: list[dict[str, AttributeValueTypeDef]] = [
        {"AggregateKey": {"S": "#stats"}, "MessagesApplied": {"N": str(ledger.counts.messages_sent)}},
        {"AggregateKey": {"S": "#applied#batch-1"}, "ExpiresAt": {"N": "1900000000"}},
        # A node every trade has left: equal to an absent one.
        {"AggregateKey": {"S": node_item_key("Theta:Emptied:AMER")}, "Value": {"N": "0"}, "TradeCount": {"N": "0"}},
    ]
    requests[target.aggregate_table].extend({"PutRequest": {"Item": item}} for item in bookkeeping)
    for table, writes in requests.items():
        for start in range(0, len(writes), 25):
            client.batch_write_item(RequestItems={table: writes[start : start + 25]})


@pytest.fixture
def sent_ledger(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Ledger]:
    """A ledger of 600 generated messages, saved to a file."""
    path = tmp_path_factory.mktemp("ledger") / "ledger.json"
    ledger = Ledger()
    for message in generate_messages(GeneratorConfig(seed=99, count=600)):
        ledger.record(message)
    ledger.save(path)
    return path, ledger


@pytest.fixture
def local_stack(tmp_path: Path) -> Iterator[LocalPaths]:
    """A `make up`-style stack of its own (`tests.producer.local_stack`); tests using it carry the
    `emulator` mark themselves."""
    with started_local_stack(tmp_path) as paths:
        yield paths
