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


def select_latest_versions(
    received: Iterable[Received], message_of: Callable[[Received], TradeMessage]
) -> BatchSelection[Received]:
    """Keep only the highest Version per TradeID, in order of first appearance.

    Duplicates and stale versions inside one batch would fail their conditional
    update anyway; setting them aside here saves the write. On equal versions the
    first occurrence is the one written, as the conditional update decides across
    batches.
    """
    latest: dict[str, Received] = {}
    selection: BatchSelection[Received] = BatchSelection()
    for item in received:
        message = message_of(item)
        kept_item = latest.get(message.trade_id)
        kept = None if kept_item is None else message_of(kept_item)
        if kept is None or message.version > kept.version:
            if kept is not None:  # the kept message and its same-version siblings are now stale
                siblings = [i for i in selection.same_version if message_of(i).trade_id == message.trade_id]
                selection.same_version = [i for i in selection.same_version if i not in siblings]
                selection.superseded += 1 + len(siblings)
            latest[message.trade_id] = item
        elif message.version == kept.version:
            selection.same_version.append(item)
        else:
            selection.superseded += 1
    selection.latest = list(latest.values())
    return selection


def is_conflicting_duplicate(message: TradeMessage, applied_digest: str | None) -> bool:
    """Same TradeID and Version as the applied message, but other content.

    `applied_digest` is the content digest stored for this message's version, or
    None when the table holds a newer version (then the message is merely stale).
    """
    return applied_digest is not None and applied_digest != message.content_digest
