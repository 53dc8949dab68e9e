"""`python -m benchmarks.batch_selection [--copies N] [--repetitions R]`: in-batch version selection.

The state function keeps the highest Version per TradeID of its batch
(`aggregation.batches.select_latest_versions`). A batch may hold many copies of one trade (a
producer retrying, a replayed partition): this times the selection alone, pure CPU, on the
records the handler itself builds (`state_function.handler.receive`) for `copies` copies of one
trade at one version followed by one higher version, the shape that made the former selection
quadratic (issue 21, finding 11). Stateful AWS calls play no part, so nothing is stubbed.
Prints the median over the repetitions; docs/benchmarks.md quotes it.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from aggregation.batches import select_latest_versions
from aggregation.value_domain import DEFAULT_VALUE_DOMAIN
from benchmarks.harness import median
from local.runner.inprocess import LEVELS, trade_message
from state_function.handler import ReceivedMessage, receive
from state_function.quarantine import RecordOrigin

SHARD = "shardId-000000000000"


def copies_then_a_newer_version(copies: int) -> list[ReceivedMessage]:
    """`copies` records of one trade at Version 1 (distinct records, equal messages), then Version 2."""
    payloads = [trade_message("copied", 1, "10.5")] * copies + [trade_message("copied", 2, "11")]
    received = []
    for position, payload in enumerate(payloads, start=1):
        origin = RecordOrigin(f"{SHARD}:{position:056d}", SHARD, f"{position:056d}", "copied", payload)
        record = receive(origin, LEVELS, DEFAULT_VALUE_DOMAIN)
        assert isinstance(record, ReceivedMessage)
        received.append(record)
    return received


def selection_seconds(received: Sequence[ReceivedMessage], repetitions: int) -> float:
    """Median wall time of one selection over the batch (checked: one message kept, the rest stale)."""
    timings = []
    for _ in range(repetitions):
        started = time.perf_counter()
        selection = select_latest_versions(received, lambda item: item.message)
        timings.append(time.perf_counter() - started)
        assert [item.message.version for item in selection.latest] == [2]
        assert selection.superseded == len(received) - 1 and not selection.same_version
    return median(timings)


def main(arguments: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.batch_selection", description=__doc__)
    parser.add_argument("--copies", type=int, default=10_000)
    parser.add_argument("--repetitions", type=int, default=3)
    options = parser.parse_args(arguments)
    received = copies_then_a_newer_version(options.copies)
    seconds = selection_seconds(received, options.repetitions)
    print(f"{options.copies:,} copies of one trade, then a newer version: selection {seconds * 1000:.1f} ms")


if __name__ == "__main__":
    main()
