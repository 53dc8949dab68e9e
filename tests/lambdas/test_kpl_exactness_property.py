"""Issue 25, as a property: however messages are packed into KPL aggregates, sent again, or mixed
with plain records, the state stage receives exactly the messages sent, in order, each user record
under an identity of its own. Since the state stage's identity of a message is its TradeID and
Version (never the Kinesis record), the trades' final states, and so every total, are those of
sending each message once, plainly.

The aggregates are made by awslabs' `aws-kinesis-agg`; the state function's own reading of a
Kinesis record (`record_origins`, then `parse_trade_message`) is what is checked. Pure: no
emulator (tests/lambdas/state_function/test_aggregates.py runs the same through real tables).
"""

import base64
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from aggregation.messages import parse_trade_message
from local.runner.inprocess import LEVELS, trade_message
from state_function.handler import record_origins
from state_function.quarantine import RecordOrigin
from tests.lambdas.kpl_helpers import kpl_aggregate

Message = tuple[str, int, str]  # TradeID, Version, Value


def kinesis_record(data: bytes, sequence: int) -> dict[str, Any]:
    event_id = f"shardId-000000000000:{sequence:056d}"
    record: dict[str, Any] = {
        "eventID": event_id,
        "kinesis": {
            "sequenceNumber": f"{sequence:056d}",
            "partitionKey": "pk",
            "data": base64.b64encode(data).decode(),
        },
    }
    return record


@st.composite
def sendings(draw: st.DrawFn) -> tuple[list[Message], list[tuple[str, list[int]]]]:
    """Distinct messages (one content per TradeID and Version), and how they are sent: each send
    plain (one index) or an aggregate of any indexes, repeats allowed; every message sent at least once."""
    identities = draw(
        st.lists(st.tuples(st.sampled_from("abcde"), st.integers(0, 4)), min_size=1, max_size=25, unique=True)
    )
    messages = [(trade, version, str(draw(st.decimals(-(10**6), 10**6, places=2)))) for trade, version in identities]
    indexes = st.integers(0, len(messages) - 1)
    sends = draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("plain"), indexes.map(lambda i: [i])),
                st.tuples(st.just("kpl"), st.lists(indexes, min_size=1, max_size=30)),
            ),
            max_size=12,
        )
    )
    sends.append(("kpl", list(range(len(messages)))))  # every message at least once
    return messages, draw(st.permutations(sends))


@settings(max_examples=150)
@given(sendings())
def test_any_packing_and_duplication_reaches_the_state_of_sending_each_message_once(
    sending: tuple[list[Message], list[tuple[str, list[int]]]],
) -> None:
    messages, sends = sending
    payloads = [trade_message(*message) for message in messages]
    records = [
        kinesis_record(payloads[indexes[0]] if kind == "plain" else kpl_aggregate([payloads[i] for i in indexes]), n)
        for n, (kind, indexes) in enumerate(sends)
    ]
    origins = [origin for record in records for origin in record_origins(record)]
    read = [origin for origin in origins if isinstance(origin, RecordOrigin)]
    assert read == origins, "no aggregate of aws-kinesis-agg is refused"
    received = [parse_trade_message(origin.payload, LEVELS) for origin in read]
    assert len({origin.event_id for origin in read}) == len(read), "each user record its own identity"
    sent_in_order = [messages[i] for _, indexes in sends for i in indexes]
    assert [(m.trade_id, m.version, m.value) for m in received] == [(t, v, Decimal(x)) for t, v, x in sent_in_order]
