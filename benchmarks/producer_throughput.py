"""The producer's messages per second per core, aggregated (`--aggregate`) and not.

The producer (`producer.sender.send_messages`, one process, its standard workload, its ledger
and journal included) sends flat out to a stubbed Kinesis: a local HTTP server, in a process
of its own so its CPU is not counted, that accepts PutRecords (every record, at once) and
answers ListShards with `STUB_SHARDS` shards. What is measured is the producer's own cost:
generating, serializing, packing, signing, sending and journalling. Per core = messages over
the CPU seconds the producer's process used (all its threads); the wall-clock rate is shown too.

    python -m benchmarks.producer_throughput [--messages N]   # this section alone, as markdown
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from producer.sender import SendOptions, send_messages
from toolkit.pipeline import PipelineTarget

STUB_SHARDS = 16
PLANNED_RATE = 50_000.0
DEFAULT_MESSAGES = 40_000


class _StubKinesisHandler(BaseHTTPRequestHandler):
    """PutRecords: every record accepted. ListShards: `STUB_SHARDS` shards splitting the hash range."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall between them

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        operation = self.headers.get("X-Amz-Target", "").rsplit(".", 1)[-1]
        if operation == "PutRecords":
            count = len(json.loads(body)["Records"])
            answer = {
                "FailedRecordCount": 0,
                "Records": [{"SequenceNumber": "1", "ShardId": "shardId-000000000000"}] * count,
            }
        elif operation == "ListShards":
            width = 2**128 // STUB_SHARDS
            answer = {
                "Shards": [
                    {
                        "ShardId": f"shardId-{index:012d}",
                        "HashKeyRange": {
                            "StartingHashKey": str(index * width),
                            "EndingHashKey": str(2**128 - 1 if index == STUB_SHARDS - 1 else (index + 1) * width - 1),
                        },
                        "SequenceNumberRange": {"StartingSequenceNumber": "0"},
                    }
                    for index in range(STUB_SHARDS)
                ]
            }
        else:
            self.send_error(400, f"the stub does not serve {operation}")
            return
        payload = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: one line per request would be the benchmark's main cost."""


def _serve(port: int) -> None:
    ThreadingHTTPServer(("127.0.0.1", port), _StubKinesisHandler).serve_forever()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def stubbed_kinesis() -> Iterator[str]:
    """The stub's endpoint URL, served by a child process for as long as the block runs."""
    port = _free_port()
    server = multiprocessing.get_context("spawn").Process(target=_serve, args=(port,), daemon=True)
    server.start()
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.join()


@dataclass(frozen=True)
class ProducerRun:
    aggregate: bool
    messages: int
    records: int
    megabytes: float
    wall_seconds: float
    cpu_seconds: float

    @property
    def per_core(self) -> float:
        return self.messages / self.cpu_seconds

    @property
    def wall_rate(self) -> float:
        return self.messages / self.wall_seconds

    @property
    def cores_for_planned_rate(self) -> float:
        return PLANNED_RATE / self.per_core


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_producer_throughput(messages: int, report: Callable[[str, float], None]) -> list[ProducerRun]:
    """One flat-out run of `messages`, plain then aggregated."""
    runs = []
    with stubbed_kinesis() as endpoint, tempfile.TemporaryDirectory(prefix="bench-producer-") as scratch:
        target = PipelineTarget(
            stream_name="bench",
            state_table="-",
            aggregate_table="-",
            delta_table="-",
            quarantine="-",
            region="us-east-1",
            endpoint_url=endpoint,
            source="benchmark",
        )
        for step, aggregate in enumerate((False, True)):
            report("producer messages/s per core", step / 2)
            options = SendOptions(
                count=messages,
                seed=11,
                ledger_path=Path(scratch) / f"ledger-{aggregate}.json",
                aggregate=aggregate,
                serialize_puts=False,
                timestamp_epoch_ms=1_700_000_000_000,
            )
            cpu, wall = _cpu_seconds(), time.perf_counter()
            summary = send_messages(target, options)
            runs.append(
                ProducerRun(
                    aggregate=aggregate,
                    messages=summary.messages_sent,
                    records=summary.records_sent,
                    megabytes=summary.bytes_sent / 1e6,
                    wall_seconds=time.perf_counter() - wall,
                    cpu_seconds=_cpu_seconds() - cpu,
                )
            )
        report("producer messages/s per core", 1.0)
    return runs


def producer_section(runs: list[ProducerRun]) -> list[str]:
    """The page's section (`benchmarks/report.py`)."""
    rows = [
        f"| {'aggregated (KPL, 50 KiB)' if run.aggregate else 'one record per message'} | {run.messages:,} | "
        f"{run.records:,} | {run.megabytes:,.1f} MB | {run.wall_rate:,.0f} | **{run.per_core:,.0f}** | "
        f"{run.cores_for_planned_rate:,.1f} |"
        for run in runs
    ]
    return [
        "## 8. Producer messages per second per core",
        "",
        "`benchmarks/producer_throughput.py`: `python -m producer send`'s code (`send_messages`, one process, "
        "standard workload, ledger and journal written) flat out against a stubbed Kinesis (a local HTTP "
        f"server in another process accepting every PutRecords, {STUB_SHARDS} shards). Per core: messages over "
        "the producer process's CPU seconds, all threads; `--processes N` runs N such processes.",
        "",
        "| mode | messages | Kinesis records | sent | msg/s (wall) | msg/s per core | cores for 50,000 msg/s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.producer_throughput", description=__doc__)
    parser.add_argument("--messages", type=int, default=DEFAULT_MESSAGES)
    arguments = parser.parse_args()
    runs = run_producer_throughput(arguments.messages, lambda step, fraction: None)
    print("\n".join(producer_section(runs)))


if __name__ == "__main__":
    main()
