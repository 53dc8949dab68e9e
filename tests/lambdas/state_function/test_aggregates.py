"""KPL aggregates at the state function, against real tables: each user record a message of its own."""

from decimal import Decimal

from local.runner.inprocess import Pipeline, expected_totals, trade_message
from tests.lambdas.kpl_helpers import kpl_aggregate

PATH = ("Delta", "FXSpot", "AMER")


def test_bad_user_records_are_quarantined_one_by_one_with_their_sub_sequence_numbers(pipeline: Pipeline) -> None:
    aggregate = kpl_aggregate(
        [trade_message("a", 1, "10"), b'{"TradeID": "x"', trade_message("b", 1, "20"), b"\xff not utf-8"]
    )
    summary = pipeline.run_state([aggregate, trade_message("c", 1, "30")])
    assert summary == {
        "received": 5,
        "written": 3,
        "duplicate_or_stale": 0,
        "conflicting_duplicates": 0,
        "quarantined": 2,
    }
    assert {item["TradeID"] for item in pipeline.scan("state")} == {"a", "b", "c"}
    quarantined = sorted(pipeline.scan("quarantine"), key=lambda item: int(item["SubSequenceNumber"]))
    assert [int(item["SubSequenceNumber"]) for item in quarantined] == [1, 3]
    (event,) = {item["RecordId"].rsplit(":", 1)[0] for item in quarantined}
    assert [item["RecordId"] for item in quarantined] == [f"{event}:1", f"{event}:3"]
    assert {item["SequenceNumber"] for item in quarantined} == {event.split(":", 1)[1]}
    assert quarantined[0]["Reason"].startswith("record is not JSON")
    assert quarantined[1]["Reason"].startswith("record is not UTF-8")
    assert quarantined[1]["PayloadBinary"].value == b"\xff not utf-8"


def test_a_corrupt_aggregate_is_quarantined_whole_and_the_batch_goes_on(pipeline: Pipeline) -> None:
    aggregate = bytearray(kpl_aggregate([trade_message("a", 1, "10"), trade_message("b", 1, "20")]))
    aggregate[-1] ^= 0x01  # the digest's last byte
    summary = pipeline.run_state([bytes(aggregate), trade_message("c", 1, "30")])
    assert (summary["received"], summary["written"], summary["quarantined"]) == (2, 1, 1)
    (item,) = pipeline.scan("quarantine")
    assert "MD5 digest does not match" in item["Reason"]
    assert "SubSequenceNumber" not in item
    assert item["PayloadBinary"].value == bytes(aggregate)


def test_duplicated_and_overlapping_aggregates_mixed_with_plain_records_are_exact(pipeline: Pipeline) -> None:
    messages = [trade_message(f"t{n}", n % 3, f"{n}.25", PATH) for n in range(30)]
    first, second = kpl_aggregate(messages[:20]), kpl_aggregate(messages[10:25])
    batches = [
        [first, messages[25], first],  # an aggregate sent twice in one batch
        [second, *messages[20:30]],  # user records 10-19 again, in another aggregate, and plain duplicates
        [first, second],  # both again, in a later batch
    ]
    for batch in batches:
        pipeline.run_all_stages(batch)
    final = {f"t{n}": (Decimal(f"{n}.25"), PATH) for n in range(30)}
    assert pipeline.aggregates() == expected_totals(final)
    assert pipeline.stats()["MessagesApplied"] == 30
