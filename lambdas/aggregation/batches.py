"""Batch-level rules: which messages of a batch are worth a write."""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from aggregation.messages import TradeMessage

Received = TypeVar("Received")


@dataclass
class BatchSelection(Generic[Received]):
    """What one batch's messages come to before any write."""

    latest: list[Received] = field(default_factory=list)  # highest version per TradeID: written
    superseded: int = 0  # lower versions inside the batch: stale, no write needed
    # Later messages with the same version as the kept one: duplicates, or conflicts
    # when their content differs from the version that ends up applied.
    same_version: list[Received] = field(default_factory=list)


@dataclass
class _Kept(Generic[Received]):
    """The message kept so far for one TradeID, and how many same-version siblings it has."""

    item: Received
    version: int
    rank: int  # how many times a higher version replaced the kept one: names its siblings
    siblings: int = 0


def select_latest_versions(
    received: Iterable[Received], message_of: Callable[[Received], TradeMessage]
) -> BatchSelection[Received]:
    """Keep only the highest Version per TradeID, in order of first appearance.

    Duplicates and stale versions inside one batch would fail their conditional
    update anyway; setting them aside here saves the write. On equal versions the
    first occurrence is the one written, as the conditional update decides across
    batches.

    One pass, each message read once (`message_of` is called once per item): a same-version
    sibling is noted with the rank of the message it duplicates, and a higher version only
    bumps the rank, so the siblings it makes stale are dropped at the end without searching
    for them. (Searching was quadratic: 10,000 copies of a trade then a higher version took
    seconds, docs/benchmarks.md.)
    """
    kept: dict[str, _Kept[Received]] = {}
    same_version: list[tuple[str, int, Received]] = []
    selection: BatchSelection[Received] = BatchSelection()
    for item in received:
        message = message_of(item)
        current = kept.get(message.trade_id)
        if current is None:
            kept[message.trade_id] = _Kept(item, message.version, rank=0)
        elif message.version > current.version:  # the kept message and its siblings are now stale
            selection.superseded += 1 + current.siblings
            kept[message.trade_id] = _Kept(item, message.version, rank=current.rank + 1)
        elif message.version == current.version:
            current.siblings += 1
            same_version.append((message.trade_id, current.rank, item))
        else:
            selection.superseded += 1
    selection.latest = [entry.item for entry in kept.values()]
    selection.same_version = [item for trade_id, rank, item in same_version if kept[trade_id].rank == rank]
    return selection


def is_conflicting_duplicate(message: TradeMessage, applied_digest: str | None) -> bool:
    """Same TradeID and Version as the applied message, but other content.

    `applied_digest` is the content digest stored for this message's version, or
    None when the table holds a newer version (then the message is merely stale).
    """
    return applied_digest is not None and applied_digest != message.content_digest
