"""Re-delivering a batch in other boundaries or order, or again after it succeeded.

Lambda documents that it retries a failed stream batch "until it succeeds", not that the
retry holds the same records. A batching window that closes later, a batch size changed
by an update, a mapping disabled and enabled again, a tumbling window replayed from its
start: each can give the retry other boundaries. The pipeline's exactness must not depend
on them, so the local runner can make them happen on purpose, per function:

- **grown**: the failed records and up to `BatchSize` in all with the ones that follow;
- **shrunk**: a non-empty prefix of the failed records (the rest comes in later batches);
- **shifted**: starts up to a batch earlier, with records that were already delivered and
  committed (a replay), and keeps its length by dropping records at the end;
- **reordered** (mappings with a tumbling window only): the retry's records out of sequence
  order, the same records or any of the shapes above. Lambda's pages on tumbling windows
  (Lambda Developer Guide, "Tumbling windows", DynamoDB Streams and Kinesis) say that Lambda
  processes each record at least once, that records are always processed in order the first
  time, and that if records are processed more than once they might be processed out of
  order. So only records delivered before are reordered: a first delivery never is, and the
  records a grown retry adds follow the failed ones in order.

Every shape starts at or before the first record not yet committed and includes it, as any
real redelivery does (the checkpoint never moves past an unprocessed record), and its
records, sorted, are consecutive records of the lane (of the shard, with one lane and no
filter): what the map function's coverage ranges assume of a retry.

**Again after success**: Lambda processes each record "at least once", so a batch whose
invocation succeeded can be delivered again (its checkpoint was not yet stored). For every
function, a successful batch is delivered once more with `LOCAL_RUNNER_AGAIN_AFTER_SUCCESS_PCT`
percent chance, before its checkpoint moves (out of order too on a reordering mapping), so
whatever an execution environment remembers between invocations is proven against it.

`LOCAL_RUNNER_REDELIVERY` names the services (`POWERTOOLS_SERVICE_NAME`: `map`, `reduce`,
...) whose retries are reshaped, comma-separated; `LOCAL_RUNNER_REDELIVERY_SEED` seeds the
choices. Unset (and no duplicates after success), retries re-deliver the identical batch.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from local.runner.events import sequence_number_of

ENVIRONMENT_VARIABLE = "LOCAL_RUNNER_REDELIVERY"
SEED_VARIABLE = "LOCAL_RUNNER_REDELIVERY_SEED"
AGAIN_AFTER_SUCCESS_VARIABLE = "LOCAL_RUNNER_AGAIN_AFTER_SUCCESS_PCT"
SHAPES = ("grown", "shrunk", "shifted")
REORDERED = "reordered"
COUNTED_SHAPES = (*SHAPES, REORDERED)
"""What `FunctionStats.reshaped_retries` counts: a reordered grown retry counts as both."""

Record = dict[str, Any]


@dataclass(frozen=True)
class Redelivery:
    """The records of the next attempt, the shape of their boundaries, and whether they come out of order."""

    shape: str
    records: list[Record]
    reordered: bool = False


@dataclass(frozen=True)
class RedeliveryPolicy:
    """Which services get reshaped retries, how often a success is delivered again, and the seed of the choices."""

    services: frozenset[str]
    seed: int = 0
    again_after_success_pct: float = 0.0
    """Every function's: the chance that a batch that succeeded is delivered once more."""

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> RedeliveryPolicy | None:
        services = frozenset(s.strip() for s in environ.get(ENVIRONMENT_VARIABLE, "").split(",") if s.strip())
        raw_pct = environ.get(AGAIN_AFTER_SUCCESS_VARIABLE, "0").strip() or "0"
        try:
            again = float(raw_pct)
        except ValueError:
            again = -1.0
        if not 0 <= again <= 100:
            raise ValueError(f"{AGAIN_AFTER_SUCCESS_VARIABLE}={raw_pct!r} is not a percentage from 0 to 100")
        if not services and not again:
            return None
        raw_seed = environ.get(SEED_VARIABLE, "0").strip() or "0"
        if not raw_seed.lstrip("-").isdigit():
            raise ValueError(f"{SEED_VARIABLE}={raw_seed!r} is not an integer")
        return cls(services, int(raw_seed), again)

    def as_environment(self) -> dict[str, str]:
        environment = {ENVIRONMENT_VARIABLE: ",".join(sorted(self.services)), SEED_VARIABLE: str(self.seed)}
        if self.again_after_success_pct:
            environment[AGAIN_AFTER_SUCCESS_VARIABLE] = f"{self.again_after_success_pct:g}"
        return environment

    def for_service(self, service: str) -> RedeliveryPolicy | None:
        """What applies to one function: its retries reshaped if its service is named, duplicates after success."""
        services = self.services & {service}
        if not services and not self.again_after_success_pct:
            return None
        return replace(self, services=services)

    @property
    def reshapes(self) -> bool:
        """Retries come in other boundaries (the policy names the function's service)."""
        return bool(self.services)

    def chooser(self, function_name: str) -> random.Random:
        """The random source of one shard poller (the same choices for the same seed and function)."""
        return random.Random(f"{self.seed}/{function_name}")


def out_of_order(records: Sequence[Record], rng: random.Random) -> list[Record]:
    """The records in another order than the one given (at least two records)."""
    shuffled = list(records)
    rng.shuffle(shuffled)
    if shuffled == list(records):
        shuffled.reverse()
    return shuffled


def reshape(
    failed: Sequence[Record],
    *,
    following: Sequence[Record],
    delivered_before: Sequence[Record],
    committed: str | None,
    batch_size: int,
    rng: random.Random,
    reorder: bool = False,
    fits: Callable[[Sequence[Record]], bool] = lambda _: True,
) -> Redelivery:
    """The next attempt after `failed` failed, in a shape drawn among those possible.

    `failed` is in sequence order. `following` are the records after the batch that the mapping
    would deliver (read, and passing its filter); `delivered_before` the last records already
    committed, oldest first (a shifted retry replays those that precede the failed batch);
    `committed` the checkpoint, which every shape must pass: a failed batch that was itself
    shifted starts before it. `reorder`: the mapping may deliver a retry out of order (it has
    a tumbling window); then the same records reordered is a shape too, and any other shape
    comes out of order half the time: the records delivered before, that is, while those a
    grown retry adds, delivered for the first time, follow them in order. `fits`: whether
    records make an event within Lambda's payload limit (grown and shifted retries add
    records, never past it).
    """
    checkpoint = -1 if committed is None else int(committed)
    first_new = next((i for i, r in enumerate(failed) if int(sequence_number_of(r)) > checkpoint), len(failed) - 1)
    start = sequence_number_of(failed[0])
    earlier = [record for record in delivered_before if int(sequence_number_of(record)) < int(start)]
    possible: list[str] = []
    if following and len(failed) < batch_size and fits([*failed, following[0]]):
        possible.append("grown")
    if len(failed) > first_new + 1:
        possible.append("shrunk")
    if earlier and batch_size > first_new + 1 and fits([earlier[-1], *failed[: first_new + 1]]):
        possible.append("shifted")
    if reorder and len(failed) > 1:
        possible.append(REORDERED)
    if not possible:
        return Redelivery("identical", list(failed))
    shape = rng.choice(possible)
    records: list[Record]
    if shape == REORDERED:
        return Redelivery("identical", out_of_order(failed, rng), reordered=True)
    if shape == "grown":
        records = _grown(failed, following, batch_size, rng, fits)
    elif shape == "shrunk":
        records = list(failed[: rng.randint(first_new + 1, len(failed) - 1)])
    else:
        records = _shifted(failed, earlier, first_new, batch_size=batch_size, rng=rng, fits=fits)
    again = records[: len(failed)] if shape == "grown" else records  # delivered before: these may be reordered
    if reorder and len(again) > 1 and rng.random() < 0.5:
        return Redelivery(shape, [*out_of_order(again, rng), *records[len(again) :]], reordered=True)
    return Redelivery(shape, records)


def _grown(
    failed: Sequence[Record],
    following: Sequence[Record],
    batch_size: int,
    rng: random.Random,
    fits: Callable[[Sequence[Record]], bool],
) -> list[Record]:
    extra = rng.randint(1, min(len(following), batch_size - len(failed)))
    while extra > 1 and not fits([*failed, *following[:extra]]):
        extra -= 1
    return [*failed, *following[:extra]]


def _shifted(
    failed: Sequence[Record],
    earlier: Sequence[Record],
    first_new: int,
    *,
    batch_size: int,
    rng: random.Random,
    fits: Callable[[Sequence[Record]], bool],
) -> list[Record]:
    replayed = list(earlier[-rng.randint(1, min(len(earlier), batch_size - 1 - first_new)) :])
    kept = min(len(failed), batch_size - len(replayed))
    while kept > first_new + 1 and not fits([*replayed, *failed[:kept]]):
        kept -= 1
    while len(replayed) > 1 and not fits([*replayed, *failed[:kept]]):
        replayed = replayed[1:]
    return [*replayed, *failed[:kept]]
