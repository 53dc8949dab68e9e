"""`send --aggregate`, `--processes` and the ledger's journal.

The aggregates are read back with awslabs' `aws-kinesis-agg` deaggregator, not our reader. The
kill test SIGKILLs a running `python -m producer send --processes 2 --aggregate` against a moto
server, then compares what reached the stream with what the ledger (and its journals) says.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import boto3
import pytest
from aws_kinesis_agg.deaggregator import deaggregate_records

from aggregation.kpl import user_records as kpl_user_records
from local.emulator.control import EmulatorProcess
from producer.generator import GeneratorConfig, generate_messages
from producer.journal import JournalWriter, journal_path, journals_of, read_journal
from producer.kpl import AGGREGATE_MAX_BYTES, HOSTILE_KEY_BYTES, ShardMap
from producer.ledger import Ledger
from producer.sender import MAX_BYTES_PER_RECORD, SendOptions, pack, record_size, send_messages
from tests.producer.test_producer_cli import REPOSITORY, run_cli, write_outputs
from toolkit.pipeline import PipelineTarget

TWO_SHARDS = ShardMap([0, 2**127])


@pytest.fixture
def stream(emulator: EmulatorProcess) -> PipelineTarget:
    """A two-shard stream in the project's emulator, whose Kinesis takes concurrent puts from several
    processes correctly (moto alone can overwrite one call's records with another's:
    docs/design.md, "What the emulator gets wrong")."""
    target = PipelineTarget(
        stream_name=f"trades-{uuid.uuid4().hex[:8]}",
        state_table="-",
        aggregate_table="-",
        delta_table="-",
        quarantine="-",
        region="us-east-1",
        endpoint_url=emulator.endpoint_url,
        source="test",
    )
    kinesis = boto3.client("kinesis", region_name=target.region, endpoint_url=target.endpoint_url)
    kinesis.create_stream(StreamName=target.stream_name, ShardCount=2)
    return target


def user_records(data: bytes, partition_key: str) -> list[tuple[str, bytes]]:
    """What `aws-kinesis-agg` reads out of one Kinesis record (itself, when it is not an aggregate)."""
    record = {"kinesis": {"kinesisSchemaVersion": "1.0", "sequenceNumber": "1", "approximateArrivalTimestamp": 0}}
    record["kinesis"].update({"partitionKey": partition_key, "data": base64.b64encode(data)})
    return [
        (str(user["kinesis"]["partitionKey"]), base64.b64decode(user["kinesis"]["data"]))
        for user in deaggregate_records([record])
    ]


def test_aggregates_hold_one_shards_messages_in_order_within_the_limits() -> None:
    messages = list(generate_messages(GeneratorConfig(seed=5, count=4000, oversized_records=1)))
    records = pack(messages, TWO_SHARDS)
    assert len(records) < len(messages) / 20, "messages are packed, not sent one by one"
    by_shard: dict[int, list[tuple[str, bytes]]] = {0: [], 1: []}
    for record in records:
        assert record_size(record) <= MAX_BYTES_PER_RECORD
        carried = user_records(record.data, record.partition_key)
        assert carried == [(m.partition_key, m.data) for m in record.messages]
        if len(record.data) > AGGREGATE_MAX_BYTES:
            assert len(carried) == 1, "only a message too large for an aggregate goes alone"
        shards = {TWO_SHARDS.shard_of(key) for key, _ in carried} | {TWO_SHARDS.shard_of(record.partition_key)}
        (shard,) = shards
        by_shard[shard].extend(carried)
    for shard, carried in by_shard.items():
        expected = [(m.partition_key, m.data) for m in messages if TWO_SHARDS.shard_of(m.partition_key) == shard]
        assert carried == expected


def test_the_shard_map_is_kinesis_hashing() -> None:
    key = "trade-1"
    hash_key = int(hashlib.md5(key.encode()).hexdigest(), 16)
    assert TWO_SHARDS.shard_of(key) == (1 if hash_key >= 2**127 else 0)


def test_a_journal_is_absorbed_once_and_counts_what_is_in_doubt(tmp_path: Path) -> None:
    ledger_path = tmp_path / "ledger.json"
    messages = list(generate_messages(GeneratorConfig(seed=3, count=30, malformed_pct=0)))
    writer = JournalWriter(journal_path(ledger_path, "run", 0))
    writer.sending(0, 10)
    writer.accepted(0, messages[:10])
    writer.settled(0)
    writer.sending(1, 20)
    writer.accepted(1, messages[10:15])  # then the process is killed: 15 of chunk 1 in doubt
    writer.close()
    accepted, in_doubt = read_journal(journal_path(ledger_path, "run", 0))
    assert (len(accepted), in_doubt) == (15, 15)

    direct = Ledger()
    for message in messages[:15]:
        direct.record(message)
    ledger = Ledger.load(ledger_path)
    assert ledger.trades == direct.trades
    assert (ledger.counts.messages_sent, ledger.counts.uncertain) == (15, 15)
    ledger.save(ledger_path)
    again = Ledger.load(ledger_path)  # the journal is still there: not applied twice
    assert (again.counts.messages_sent, again.counts.uncertain) == (15, 15)


def test_verify_says_how_many_messages_were_in_doubt(pipeline: PipelineTarget, tmp_path: Path) -> None:
    outputs = write_outputs(pipeline, tmp_path)
    ledger_path = tmp_path / "ledger.json"
    writer = JournalWriter(journal_path(ledger_path, "killed", 0))
    writer.sending(0, 7)  # and nothing after: the process was killed with 7 messages in flight
    writer.close()
    verified = run_cli(
        "verify",
        "--outputs",
        str(outputs),
        "--ledger",
        str(ledger_path),
        "--timeout",
        "5",
        "--settle",
        "1",
        "--no-progress",
        cwd=tmp_path,
    )
    assert "7 messages in doubt" in verified.stdout, verified.stdout + verified.stderr


def test_a_torn_last_line_is_left_out(tmp_path: Path) -> None:
    path = journal_path(tmp_path / "ledger.json", "run", 0)
    writer = JournalWriter(path)
    writer.sending(0, 3)
    writer.close()
    with path.open("ab") as handle:
        handle.write(b'{"accepted": 0, "messa')
    assert read_journal(path) == ([], 3)


def stream_messages(target: PipelineTarget) -> list[bytes]:
    """Every user record on the stream, de-aggregated by `aws-kinesis-agg`."""
    kinesis = boto3.client("kinesis", region_name=target.region, endpoint_url=target.endpoint_url)
    found: list[bytes] = []
    for shard in kinesis.list_shards(StreamName=target.stream_name)["Shards"]:
        iterator = kinesis.get_shard_iterator(
            StreamName=target.stream_name, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while True:
            page = kinesis.get_records(ShardIterator=iterator, Limit=10_000)
            for record in page["Records"]:
                found.extend(data for _, data in user_records(record["Data"], record["PartitionKey"]))
            if not page["Records"]:
                break
            iterator = page["NextShardIterator"]
    return found


def test_sigkill_loses_at_most_the_chunks_in_flight(stream: PipelineTarget, tmp_path: Path) -> None:
    outputs = write_outputs(stream, tmp_path)
    ledger_path = tmp_path / "ledger.json"
    environment = {key: value for key, value in os.environ.items() if not key.startswith("AWS_ENDPOINT")}
    environment.update({"PYTHONPATH": str(REPOSITORY), "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "t"})
    command = [sys.executable, "-m", "producer", "send", "--outputs", str(outputs), "--ledger", str(ledger_path)]
    command += [
        "--count",
        "1000000",
        "--rate",
        "4000",
        "--processes",
        "2",
        "--aggregate",
        "--no-progress",
        "--watch",
        "0",
    ]
    producer = subprocess.Popen(command, cwd=tmp_path, env=environment, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while sum(len(read_journal(path)[0]) for path in journals_of(ledger_path)) < 2000:
            assert producer.poll() is None, "the producer ended before it was killed"
            assert time.monotonic() < deadline, "the producer journalled nothing in 60 s"
            time.sleep(0.2)
    finally:
        os.killpg(producer.pid, signal.SIGKILL)
        producer.wait()
    assert not ledger_path.exists(), "killed before any save: the journals are all there is"

    ledger = Ledger.load(ledger_path)
    on_stream = stream_messages(stream)
    assert ledger.counts.messages_sent >= 2000
    # Nothing acknowledged is lost; what reached the stream unacknowledged is in doubt, and little.
    assert ledger.counts.messages_sent <= len(on_stream) <= ledger.counts.messages_sent + ledger.counts.uncertain
    latest: dict[str, int] = {}
    for data in on_stream:
        try:
            message = json.loads(data)
            trade, version = message["TradeID"], message["Version"]
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(trade, str) and type(version) is int and version > latest.get(trade, -1):
            latest[trade] = version
    for trade, state in ledger.trades.items():
        assert latest[trade] >= state.version, "a version the ledger holds reached the stream"


def test_sigterm_stops_every_process_gracefully_and_saves_the_ledger(stream: PipelineTarget, tmp_path: Path) -> None:
    outputs = write_outputs(stream, tmp_path)
    ledger_path = tmp_path / "ledger.json"
    environment = {key: value for key, value in os.environ.items() if not key.startswith("AWS_ENDPOINT")}
    environment.update({"PYTHONPATH": str(REPOSITORY), "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "t"})
    command = [sys.executable, "-m", "producer", "send", "--outputs", str(outputs), "--ledger", str(ledger_path)]
    command += ["--count", "1000000", "--rate", "3000", "--processes", "2", "--no-progress", "--watch", "0"]
    producer = subprocess.Popen(command, cwd=tmp_path, env=environment, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while sum(len(read_journal(path)[0]) for path in journals_of(ledger_path)) < 1000:
        assert producer.poll() is None, "the producer ended before it was stopped"
        assert time.monotonic() < deadline, "the producer journalled nothing in 60 s"
        time.sleep(0.2)
    producer.send_signal(signal.SIGTERM)  # the parent only, as `kill` would: it stops its children
    _, errors = producer.communicate(timeout=60)
    assert producer.returncode == 130, errors
    assert "interrupted" in errors and "Traceback" not in errors
    assert journals_of(ledger_path) == [], "merged into the ledger and deleted"
    ledger = Ledger.load(ledger_path)
    assert ledger.counts.uncertain == 0, "the chunks in flight were finished, not abandoned"
    assert ledger.counts.messages_sent == len(stream_messages(stream))


def test_an_aggregated_send_puts_every_message_on_the_stream_in_fewer_records(
    stream: PipelineTarget, tmp_path: Path
) -> None:
    ledger_path = tmp_path / "ledger.json"
    summary = send_messages(stream, SendOptions(count=1500, seed=4, aggregate=True, ledger_path=ledger_path))
    assert summary.records_sent < summary.messages_sent / 10
    on_stream = stream_messages(stream)
    assert len(on_stream) == summary.messages_sent == Ledger.load(ledger_path).counts.messages_sent == 1500
    assert journals_of(ledger_path) == []


def test_hostile_aggregates_carry_the_same_messages_in_a_frame_no_kpl_writes() -> None:
    """`--hostile-aggregates`: the state function must read the same messages out of them."""
    messages = list(generate_messages(GeneratorConfig(seed=6, count=600)))
    plain, hostile = pack(messages, TWO_SHARDS), pack(messages, TWO_SHARDS, hostile_pct=50)
    assert [r.messages for r in plain] == [r.messages for r in hostile]
    changed = [(p, h) for p, h in zip(plain, hostile, strict=True) if p.data != h.data]
    assert len(changed) == len(plain) // 2, "every other aggregate"
    for built_plain, built_hostile in changed:
        read = kpl_user_records(built_hostile.data)
        assert [r.data for r in read] == [m.data for m in built_hostile.messages]
        assert read[0].partition_key.startswith("\\xc3") and len(read[0].partition_key) > HOSTILE_KEY_BYTES
        assert record_size(built_hostile) <= MAX_BYTES_PER_RECORD
        assert [r.data for r in kpl_user_records(built_plain.data)] == [r.data for r in read]


def test_hostile_aggregates_need_aggregate() -> None:
    with pytest.raises(ValueError, match="--hostile-aggregates needs --aggregate"):
        SendOptions(count=1, hostile_aggregates_pct=10)
