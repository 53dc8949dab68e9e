"""Batch-level rules: which messages of a batch are worth a write, and which are conflicting duplicates."""

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Generic, TypeVar

from aggregation.messages import TradeMessage, content_digest
from aggregation.names import TRADE_HIERARCHY, TRADE_VALUE

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


UNKNOWN_LEVELS = "/"
"""In a stored version's digest (`stored_content_digest`), what separates the digest from the
positions of the configured levels the version has no value for."""


def stored_content_digest(item: Mapping[str, Any], levels: Sequence[str]) -> str:
    """The content of a StateTable item (as DynamoDB returns it), as the message of its TradeID
    and Version is compared with it under the levels configured now, `levels`.

    Taken from what the item stores, its `Value` and the level values of its `Hierarchy` (what
    every release wrote), never from its `ContentDigest`: that digest is of the level values in
    the order configured when it was written, so after any change of `hierarchyLevels` an
    identical message would differ from it, and the digest cannot be taken apart again.

    Compared are the Value and the levels configured now that the version has a value for: a
    level dropped since is not configured, and ignored like any other; a level added since has
    no stored value to compare with. So it is `content_digest(value, [values of those levels, in
    the order of levels])`, equal to the `content_digest` of a message whose content is the same
    when the version has a value for every configured level (always, until a level is added),
    and otherwise followed by `UNKNOWN_LEVELS` and the positions in `levels` of those it lacks,
    which `is_conflicting_duplicate` leaves out of the message's digest too.
    """
    stored = item[TRADE_HIERARCHY]["M"]
    names = [stored[level]["S"] if level in stored else None for level in levels]
    digest = content_digest(Decimal(item[TRADE_VALUE]["N"]), [name for name in names if name is not None])
    unknown = [str(position) for position, name in enumerate(names) if name is None]
    return f"{digest}{UNKNOWN_LEVELS}{','.join(unknown)}" if unknown else digest


def is_conflicting_duplicate(message: TradeMessage, applied_digest: str | None) -> bool:
    """Same TradeID and Version as the applied message, but other content.

    `applied_digest` is the digest of the content stored for this message's version (the
    `content_digest` of the message that wrote it, or `stored_content_digest` of the item read
    back, under the same levels as `message`), or None when the table holds a newer version
    (then the message is merely stale).
    """
    if applied_digest is None or applied_digest == message.content_digest:
        return False
    digest, _, unknown = applied_digest.partition(UNKNOWN_LEVELS)
    if not unknown:
        return True
    skipped = {int(position) for position in unknown.split(",")}
    known = [name for position, name in enumerate(message.hierarchy) if position not in skipped]
    return digest != content_digest(message.value, known)
