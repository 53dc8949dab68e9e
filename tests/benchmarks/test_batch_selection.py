"""The selection benchmark measures what it says: one trade's copies, one kept, the rest stale."""

import pytest

from benchmarks.batch_selection import copies_then_a_newer_version, main, selection_seconds


def test_the_batch_is_copies_of_one_trade_then_a_newer_version() -> None:
    received = copies_then_a_newer_version(50)
    assert [item.message.version for item in received] == [1] * 50 + [2]
    assert len({item.origin.event_id for item in received}) == 51, "distinct records, as Kinesis delivers them"
    assert selection_seconds(received, repetitions=1) >= 0


def test_the_command_prints_its_figure(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--copies", "20", "--repetitions", "1"])
    assert capsys.readouterr().out.startswith("20 copies of one trade, then a newer version: selection ")
