"""Re-delivering a failed batch in other boundaries: grown, shrunk or shifted.

Lambda documents that it retries a failed stream batch "until it succeeds", not that the
retry holds the same records. A batching window that closes later, a batch size changed
by an update, a mapping disabled and enabled again, a tumbling window replayed from its
start: each can give the retry other boundaries. The pipeline's exactness must not depend
on them, so the local runner can make them happen on purpose, per function:

- **grown**: the failed records and up to `BatchSize` in all with the ones that follow;
- **shrunk**: a non-empty prefix of the failed records (the rest comes in later batches);
- **shifted**: starts up to a batch earlier, with records that were already delivered and
  committed (a replay), and keeps its length by dropping records at the end.

Every shape starts at or before the first record not yet committed and includes it, as any
real redelivery does (the checkpoint never moves past an unprocessed record).

`LOCAL_RUNNER_REDELIVERY` names the services (`POWERTOOLS_SERVICE_NAME`: `map`, `reduce`,
...) whose retries are reshaped, comma-separated; `LOCAL_RUNNER_REDELIVERY_SEED` seeds the
choices. Unset, retries re-deliver the identical batch, as before.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from local.runner.events import sequence_number_of

ENVIRONMENT_VARIABLE = "LOCAL_RUNNER_REDELIVERY"
SEED_VARIABLE = "LOCAL_RUNNER_REDELIVERY_SEED"
SHAPES = ("grown", "shrunk", "shifted")

Record = dict[str, Any]


@dataclass(frozen=True)
class Redelivery:
    """The records of the next attempt and the shape they took."""

    shape: str
    records: list[Record]


@dataclass(frozen=True)
class RedeliveryPolicy:
    """Which services get reshaped retries, and the seed of the choices."""

    services: frozenset[str]
    seed: int = 0

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> RedeliveryPolicy | None:
        services = frozenset(s.strip() for s in environ.get(ENVIRONMENT_VARIABLE, "").split(",") if s.strip())
        if not services:
            return None
        raw_seed = environ.get(SEED_VARIABLE, "0").strip() or "0"
        if not raw_seed.lstrip("-").isdigit():
            raise ValueError(f"{SEED_VARIABLE}={raw_seed!r} is not an integer")
        return cls(services, int(raw_seed))

    def as_environment(self) -> dict[str, str]:
        return {ENVIRONMENT_VARIABLE: ",".join(sorted(self.services)), SEED_VARIABLE: str(self.seed)}

    def chooser(self, function_name: str) -> random.Random:
        """The random source of one shard poller (the same choices for the same seed and function)."""
        return random.Random(f"{self.seed}/{function_name}")


def reshape(
    failed: Sequence[Record],
    *,
    following: Sequence[Record],
    delivered_before: Sequence[Record],
    committed: str | None,
    batch_size: int,
    rng: random.Random,
) -> Redelivery:
    """The next attempt after `failed` failed, in a shape drawn among those possible.

    `following` are the records after the batch that the mapping would deliver (read, and
    passing its filter); `delivered_before` the last records already committed, oldest first
    (a shifted retry replays those that precede the failed batch); `committed` the checkpoint,
    which every shape must pass: a failed batch that was itself shifted starts before it.
    """
    checkpoint = -1 if committed is None else int(committed)
    first_new = next((i for i, r in enumerate(failed) if int(sequence_number_of(r)) > checkpoint), len(failed) - 1)
    start = sequence_number_of(failed[0])
    earlier = [record for record in delivered_before if int(sequence_number_of(record)) < int(start)]
    possible: list[str] = []
    if following and len(failed) < batch_size:
        possible.append("grown")
    if len(failed) > first_new + 1:
        possible.append("shrunk")
    if earlier and batch_size > first_new + 1:
        possible.append("shifted")
    if not possible:
        return Redelivery("identical", list(failed))
    shape = rng.choice(possible)
    if shape == "grown":
        extra = rng.randint(1, min(len(following), batch_size - len(failed)))
        return Redelivery(shape, [*failed, *following[:extra]])
    if shape == "shrunk":
        return Redelivery(shape, list(failed[: rng.randint(first_new + 1, len(failed) - 1)]))
    replayed = earlier[-rng.randint(1, min(len(earlier), batch_size - 1 - first_new)) :]
    kept = min(len(failed), batch_size - len(replayed))
    return Redelivery(shape, [*replayed, *failed[:kept]])
