"""The bad input of issue 6: conflicting duplicates and ~1 MB records, and how the ledger counts them."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from producer.generator import (
    MAX_TRADE_ID_LENGTH,
    OVERSIZED_RECORD_BYTES,
    OVERSIZED_RECORD_KIND,
    GeneratedMessage,
    GeneratorConfig,
    MessageKind,
    generate_messages,
)
from producer.ledger import Ledger
from producer.sender import MAX_BYTES_PER_RECORD, InFlightTrades, record_size
from tests.producer.test_producer_generator import parse, violation


def _mix(seed: int = 21, count: int = 4000) -> list[GeneratedMessage]:
    config = GeneratorConfig(
        seed=seed, count=count, malformed_pct=2, conflicting_pct=3, out_of_order_pct=10, oversized_records=3
    )
    return generate_messages(config)


def test_a_conflicting_duplicate_repeats_the_current_version_with_other_content() -> None:
    messages = _mix()
    latest: dict[str, GeneratedMessage] = {}
    conflicts = 0
    for message in messages:
        if message.kind is MessageKind.CONFLICTING_DUPLICATE:
            conflicts += 1
            assert violation(message.data) is None  # valid on its own: only the content conflicts
            original = latest[message.partition_key]
            assert original.state is not None and message.state is not None
            assert message.state.version == original.state.version
            assert (message.state.value.normalize(), message.state.hierarchy) != (
                original.state.value.normalize(),
                original.state.hierarchy,
            )
        elif message.state is not None and message.trade_id is not None:
            current = latest.get(message.trade_id)
            if current is None or current.state is None or message.state.version > current.state.version:
                latest[message.trade_id] = message
    assert conflicts >= 60


def test_a_conflicted_trade_is_never_sent_again_except_as_identical_resends() -> None:
    messages = _mix(seed=5)
    conflicted: dict[str, int] = {}
    for message in messages:
        if message.kind is MessageKind.CONFLICTING_DUPLICATE:
            conflicted[message.partition_key] = message.sequence
    assert conflicted
    for message in messages:
        after = conflicted.get(message.partition_key)
        if after is None or message.sequence <= after:
            continue
        # a later version (or a trap naming the trade) in the same batch would make the conflict merely stale
        assert message.kind is MessageKind.DUPLICATE, message.kind
        assert message.state is not None
        conflict_version = next(m.state.version for m in messages if m.sequence == after and m.state is not None)
        assert message.state.version <= conflict_version


def test_the_ledger_counts_conflicts_but_keeps_the_first_version() -> None:
    messages = _mix(seed=8)
    with_conflicts = Ledger()
    without = Ledger()
    for message in messages:
        with_conflicts.record(message)
        if message.kind is not MessageKind.CONFLICTING_DUPLICATE:
            without.record(message)
    sent = Counter(m.kind for m in messages)
    assert with_conflicts.counts.conflicting_duplicates == sent[MessageKind.CONFLICTING_DUPLICATE] > 0
    assert with_conflicts.trades == without.trades
    assert with_conflicts.aggregates() == without.aggregates()
    document = with_conflicts.to_document()
    assert Ledger.from_document(document).counts.conflicting_duplicates == sent[MessageKind.CONFLICTING_DUPLICATE]


def test_oversized_records_are_about_a_megabyte_invalid_and_within_the_kinesis_limit() -> None:
    messages = _mix(seed=3, count=1000)
    oversized = [m for m in messages if m.malformed_kind == OVERSIZED_RECORD_KIND]
    assert len(oversized) == 3
    assert len(messages) == 1000
    for message in oversized:
        assert message.kind is MessageKind.MALFORMED and message.state is None
        assert len(message.data) == OVERSIZED_RECORD_BYTES
        assert record_size(message) <= MAX_BYTES_PER_RECORD
        assert violation(message.data) == "TradeID"
        assert len(parse(message.data)["TradeID"]) > MAX_TRADE_ID_LENGTH
    ledger = Ledger()
    for message in messages:
        ledger.record(message)
    assert ledger.counts.malformed_by_kind[OVERSIZED_RECORD_KIND] == 3


def test_other_invalid_kinds_of_issue_6_are_produced() -> None:
    kinds = Counter(m.malformed_kind for m in generate_messages(GeneratorConfig(seed=7, count=6000, malformed_pct=20)))
    assert kinds["not_utf8"] > 0 and kinds["value_too_many_digits"] > 0


def test_without_the_new_options_the_stream_is_unchanged() -> None:
    default = generate_messages(GeneratorConfig(seed=42, count=500))
    explicit = generate_messages(GeneratorConfig(seed=42, count=500, conflicting_pct=0, oversized_records=0))
    assert [m.data for m in default] == [m.data for m in explicit]
    assert not any(m.kind is MessageKind.CONFLICTING_DUPLICATE for m in default)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"conflicting_pct": 101}, "conflicting"),
        ({"conflicting_pct": 50, "modifications_pct": 60}, "exceed 100"),
        ({"oversized_records": -1}, "negative"),
        ({"oversized_records": 1, "count": None}, "finite count"),
        ({"oversized_records": 300, "count": 500}, "half"),
    ],
)
def test_bad_settings_are_refused(changes: dict[str, object], message: str) -> None:
    settings: dict[str, object] = {"seed": 1, "count": 100} | changes
    with pytest.raises(ValueError, match=message):
        GeneratorConfig(**settings)  # type: ignore[arg-type]


def test_a_conflict_waits_until_its_trades_earlier_messages_are_accepted() -> None:
    messages = _mix(seed=2, count=200)
    original = next(m for m in messages if m.state is not None)
    in_flight = InFlightTrades()
    in_flight.add([original, original])
    stop = threading.Event()
    released = threading.Event()

    def conflict_sender() -> None:
        in_flight.wait_until_accepted(original.partition_key, stop)
        released.set()

    thread = threading.Thread(target=conflict_sender)
    thread.start()
    in_flight.accepted([original])
    assert not released.wait(0.3)  # one copy still in flight
    in_flight.accepted([original])
    assert released.wait(2)
    thread.join()
