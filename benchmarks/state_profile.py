"""`python -m benchmarks.state_profile`: where the state handler's CPU per record goes, as top frames.

For the state handler's profile in docs/benchmarks.md (written by hand, not by `make bench`). The
handler runs over the standard workload's Kinesis batches of 100 (the events of section 3's state
row), DynamoDB answered by `CannedResponses` and the version cache off, as in section 3. cProfile
sees one thread, so the write pool runs in the calling thread here (`CallingThreadExecutor`): every
frame of the handler, the SDK's included, is in one profile. cProfile's own overhead inflates many
small calls, so the shares are for ranking frames, not for figures (those are section 3's).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

from benchmarks.handler_overhead import CANNED_ENDPOINT
from benchmarks.harness import DUMMY_CREDENTIALS, chunks, environment, quiet_handlers
from benchmarks.profile_summary import frame_name
from benchmarks.stubbed_dynamodb import CannedResponses
from benchmarks.write_cost import STATE_BATCH_SIZE, standard_workload
from function_support import aws
from local.runner.inprocess import LambdaContextStub, Pipeline
from producer.generator import MessageGenerator
from state_function import handler as state_handler

Result = TypeVar("Result")


class CallingThreadExecutor(Executor):
    """Runs each submitted call at once, in the caller's thread."""

    def submit(self, fn: Callable[..., Result], /, *args: Any, **kwargs: Any) -> Future[Result]:
        future: Future[Result] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as error:  # handed to the caller through the future, as a pool does
            future.set_exception(error)
        return future


def profile_state_handler(messages: int, passes: int) -> pstats.Stats:
    """cProfile of `passes` runs of the state handler over `messages` standard-workload messages."""
    batches = chunks([m.data for m in MessageGenerator(standard_workload(messages))], STATE_BATCH_SIZE)
    settings = {
        "STATE_TABLE": "canned-state",
        "QUARANTINE_TABLE": "canned-quarantine",
        "STATE_VERSION_CACHE_SIZE": "0",
        "AWS_ENDPOINT_URL": CANNED_ENDPOINT,
        **DUMMY_CREDENTIALS,
    }
    canned = CannedResponses()
    pool = state_handler.write_lanes
    with environment(settings), quiet_handlers():
        aws.state_update_client.cache_clear()
        aws.dynamodb_client.cache_clear()
        canned.attach(aws.state_update_client())
        canned.attach(aws.dynamodb_client())
        state_handler.write_lanes = lambda: state_handler.WriteLanes(CallingThreadExecutor(), 1)  # type: ignore[assignment,arg-type]
        try:
            events = [Pipeline({}).kinesis_event(batch) for batch in batches]
            state_handler.lambda_handler(events[0], LambdaContextStub())  # warm-up: clients, imports
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(passes):
                for event in events:
                    state_handler.lambda_handler(event, LambdaContextStub())
            profiler.disable()
        finally:
            state_handler.write_lanes = pool
            aws.state_update_client.cache_clear()
            aws.dynamodb_client.cache_clear()
    return pstats.Stats(profiler)


def top_frames(stats: pstats.Stats, top: int) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """(self, inclusive) shares of the profile's total time, `top` frames each, largest first.

    The inclusive ranking leaves out the frames on (nearly) every sample: the handler and its
    Powertools decorators.
    """
    entries: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]  # pstats keeps it untyped
    total = sum(own for _, _, own, _, _ in entries.values())
    named = [
        (frame_name(f"{function} ({path}:{line})"), own, inclusive)
        for (path, line, function), (_, _, own, inclusive, _) in entries.items()
    ]
    own = sorted(((name, t / total) for name, t, _ in named), key=lambda entry: -entry[1])[:top]
    inclusive = sorted(((name, t / total) for name, _, t in named if t / total < 0.95), key=lambda entry: -entry[1])[
        :top
    ]
    return own, inclusive


def render(own: Sequence[tuple[str, float]], inclusive: Sequence[tuple[str, float]]) -> str:
    lines = ["| self | frame | | inclusive | frame |", "| ---: | --- | --- | ---: | --- |"]
    for (own_name, own_share), (inclusive_name, inclusive_share) in zip(own, inclusive, strict=False):
        lines.append(f"| {own_share:.1%} | `{own_name}` | | {inclusive_share:.1%} | `{inclusive_name}` |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.state_profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=4000, help="standard-workload messages (default 4000)")
    parser.add_argument("--passes", type=int, default=3, help="runs over the batches (default 3)")
    parser.add_argument("--top", type=int, default=12, help="frames per ranking (default 12)")
    arguments = parser.parse_args(argv)
    if arguments.messages < 1 or arguments.passes < 1 or arguments.top < 1:
        parser.error("--messages, --passes and --top must be at least 1")
    print(render(*top_frames(profile_state_handler(arguments.messages, arguments.passes), arguments.top)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
