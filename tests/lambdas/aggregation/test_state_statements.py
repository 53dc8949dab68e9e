"""The state statements' rules, pure: what each answer asks of the writer, and how writes are split into calls."""

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aggregation.state_statements import (
    MAX_STATEMENTS_PER_CALL,
    THROTTLING_CODES,
    Answer,
    StatementFailed,
    answer,
    call_groups,
    statement_texts,
)

STORED = {"TradeID": {"S": "t"}, "Version": {"N": "3"}}


def failed(code: str, **extra: Any) -> Any:
    return {"Error": {"Code": code, "Message": "m", **extra}}


@pytest.mark.parametrize(
    ("response", "inserting", "expected"),
    [
        ({}, True, Answer.WRITTEN),
        ({"TableName": "t"}, False, Answer.WRITTEN),
        (failed("DuplicateItem"), True, Answer.SEND_AS_UPDATE),
        (failed("DuplicateItemException"), True, Answer.SEND_AS_UPDATE),
        (failed("ConditionalCheckFailed", Item=STORED), False, Answer.STORED),
        (failed("ConditionalCheckFailed"), False, Answer.SEND_AS_INSERT),
        *[(failed(code), inserting, Answer.SEND_AGAIN) for code in THROTTLING_CODES for inserting in (True, False)],
    ],
)
def test_each_answer_says_what_to_do_next(response: Any, inserting: bool, expected: Answer) -> None:
    assert answer(response, inserting) is expected


@pytest.mark.parametrize(
    ("code", "inserting"),
    [
        ("ValidationError", True),
        ("AccessDenied", False),
        ("ResourceNotFound", True),
        ("ItemCollectionSizeLimitExceeded", False),
        ("DuplicateItem", False),  # an UPDATE never meets a duplicate: something else is wrong
        ("ConditionalCheckFailed", True),  # an INSERT has no condition of ours
        ("", True),
    ],
)
def test_any_other_error_fails_the_write_with_its_code(code: str, inserting: bool) -> None:
    with pytest.raises(StatementFailed, match=code or "failed"):
        answer(failed(code), inserting)


@given(st.integers(0, 2_000))
def test_writes_go_in_as_few_calls_as_25_allow_of_sizes_differing_by_at_most_one(count: int) -> None:
    groups = call_groups(count)
    assert [index for group in groups for index in group] == list(range(count))
    assert len(groups) == -(-count // MAX_STATEMENTS_PER_CALL)
    sizes = [len(group) for group in groups]
    assert all(0 < size <= MAX_STATEMENTS_PER_CALL for size in sizes)
    assert not sizes or max(sizes) - min(sizes) <= 1


def test_statement_texts_quote_the_table_and_bind_each_attribute_value_as_one_parameter() -> None:
    texts = statement_texts('odd"table')
    assert texts.insert_without_timestamp.startswith('INSERT INTO "odd""table" VALUE {')
    assert "'Hierarchy': ?, 'NodePath': ?" in texts.insert_without_timestamp
    assert texts.update_without_timestamp.endswith('REMOVE "Timestamp" WHERE "TradeID" = ? AND "Version" < ?')
    assert texts.insert_with_timestamp.count("?") == 1 + 6 + 1  # TradeID, ASSIGNED, Timestamp
    assert texts.update_with_timestamp.count("?") == 6 + 1 + 2  # ASSIGNED, Timestamp, TradeID and Version
