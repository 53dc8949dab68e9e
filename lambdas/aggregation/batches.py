"""Batch-level rules: which messages of a batch are worth a write, and batch identity."""

import hashlib
from collections.abc import Iterable, Sequence

from aggregation.messages import TradeMessage


def latest_versions(messages: Iterable[TradeMessage]) -> list[TradeMessage]:
    """Keep only the highest Version per TradeID, in order of first appearance.

    Duplicates and stale versions inside one batch would fail their conditional
    update anyway; dropping them here saves the write. On equal versions the first
    occurrence stands, matching what the conditional update does across batches.
    """
    latest: dict[str, TradeMessage] = {}
    for message in messages:
        kept = latest.get(message.trade_id)
        if kept is None or message.version > kept.version:
            latest[message.trade_id] = message
    return list(latest.values())


def batch_identity(event_ids: Sequence[str]) -> str:
    """SHA-256 (hex) of a stream batch's event IDs in delivery order.

    Lambda retries a failed stream batch with the identical records, so a retry
    computes the same identity; every record's event ID is unique, so two
    different batches never share one.
    """
    if not event_ids:
        raise ValueError("an empty batch has no identity")
    digest = hashlib.sha256()
    for event_id in event_ids:
        digest.update(event_id.encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()
