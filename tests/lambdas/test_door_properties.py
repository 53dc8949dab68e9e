"""Issue 21, as a property: a record the state function accepts is writable by every later stage.

Records are generated at the edges (extreme exponents, zeros with huge exponents, 38, 39 and
400+ digit numbers, versions around 10^38, level values that begin with `#`, whitespace,
unicode, lone surrogates, terminal escapes, C1 controls and bidirectional overrides). Each is
either refused by validation with a reason, or passes every
stage's write-building without an exception: the state statements as the handler builds them, the
map stage's delta items, the reduce transactions and the archive document, each checked
against the request shapes of botocore's DynamoDB model and DynamoDB's item and key limits. The
totals every stage would write equal an independent sum of the accepted records' values, read
from the JSON text with plain Decimal arithmetic. Every accepted TradeID and node key renders in
a terminal (rich, colours on) exactly as written, without a control character (issue 26). Pure
functions only, no emulator.
"""

import json
from decimal import Context, Decimal, Inexact, Rounded
from typing import Any, cast

import botocore.session
from boto3.dynamodb.types import TypeSerializer
from botocore.validate import validate_parameters
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from aggregation.archive import (
    ArchivedDelta,
    StreamPosition,
    archived_totals,
    encode_delta_document,
    parse_delta_document,
)
from aggregation.delta_items import decode_delta_batch, fits_item_limit
from aggregation.exact import dynamodb_number
from aggregation.hierarchy import DYNAMODB_MAX_KEY_BYTES
from aggregation.item_size import MAX_ITEM_BYTES, item_size_bytes
from aggregation.messages import InvalidMessage, TradeMessage, parse_trade_message
from aggregation.state_statements import insert_statement, state_write_values, statement_texts, update_statement
from aggregation.stream_images import decode_image
from aggregation.transactions import DeltaBatch, plan_transactions, split_into_units
from aggregation.value_domain import DEFAULT_VALUE_DOMAIN
from local.emulator.partiql_statements import Insert, Update, parse
from local.runner.inprocess import LEVELS
from map_function.handler import StateChange, delta_items, trade_state
from reduce_function.handler import IdempotencyMode, transaction_items
from toolkit.untrusted import UNSAFE_CHARACTERS, untrusted_text

DYNAMODB = botocore.session.get_session().get_service_model("dynamodb")
TRUTH = Context(prec=1_000, traps=[Inexact, Rounded])
"""The test's own arithmetic: plain Decimal, wide enough that every sum here is exact (and
trapping, so an inexact one fails the test rather than hiding)."""

EXPONENTS = [0, 1, -1, 17, 18, 28, 38, 89, 125, 126, -10, -11, -128, -130, -131, -165, 300, -500, 999_999_999]
EXPONENTS += [-999_999_999]


def digits(count: st.SearchStrategy[int]) -> st.SearchStrategy[str]:
    return count.flatmap(lambda n: st.text("0123456789", min_size=n, max_size=n))


DIGIT_COUNTS = st.one_of(st.integers(1, 20), st.sampled_from([28, 37, 38, 39, 40, 400, 401, 450]))

NUMBER_TEXT = st.one_of(
    # a sign, an integer part, maybe a fraction, maybe an exponent from the edges
    st.builds(
        lambda sign, whole, fraction, exponent: f"{sign}{whole.lstrip('0') or '0'}{fraction}{exponent}",
        st.sampled_from(["", "-"]),
        digits(DIGIT_COUNTS),
        st.one_of(st.just(""), digits(DIGIT_COUNTS).map(lambda d: "." + d)),
        st.one_of(st.just(""), st.sampled_from(EXPONENTS).map(lambda e: f"E{e:+d}")),
    ),
    # zeros of every spelling
    st.builds(
        lambda sign, zeros, exponent: f"{sign}0{zeros}{exponent}",
        st.sampled_from(["", "-"]),
        st.one_of(st.just(""), st.integers(1, 500).map(lambda n: "." + "0" * n)),
        st.sampled_from(EXPONENTS).map(lambda e: f"e{e:+d}"),
    ),
    st.sampled_from(["1e9999999999999999999", "0", "-0", "1E+17", "999999999999999999.9999999999", "1E-10"]),
    # values of the aggregatable domain, spelled with trailing zeros or an exponent
    st.builds(
        lambda value, zeros, shift: f"{value.scaleb(-shift):f}{'' if value % 1 else '.'}{'0' * zeros}E{shift:+d}",
        st.decimals(min_value=-(10**18) + 1, max_value=10**18 - 1, places=10, allow_nan=False),
        st.sampled_from([0, 0, 1, 40]),
        st.sampled_from([0, 0, 3, -2]),
    ),
)

VERSION_TEXT = st.one_of(
    st.integers(0, 1_000).map(str),
    st.integers(10**38 - 3, 10**38 + 3).map(str),
    st.sampled_from(["-1", "1" + "0" * 400, "1E+38", "1.0", "true", '"3"']),
)

HOSTILE_TEXT = [
    "Delta\x1b[2J\x1b[H",  # clear the screen
    "\x1b]0;title\x07",  # OSC 0: the window title
    "\x1b]8;;http://x\x1b\\y\x1b]8;;\x1b\\",  # OSC 8: a hyperlink
    "\x1b]52;c;aGk=\x07",  # OSC 52: write the clipboard
    "\x9b2J",  # the C1 control sequence introducer
    "\u202eHCTAM",  # right-to-left override
    "x\u2066y\u2069",  # isolates
    "Delta[/]",
    "[bold green]verdict: MATCH",
    "[link=http://x]y[/link]",
]
"""Strings a producer could use to forge what the operator sees (control characters are refused, markup is
text)."""

LEVEL_VALUE = st.one_of(
    st.text(min_size=1, max_size=140),
    st.text(max_size=20).map(lambda text: "#" + text),
    st.sampled_from([" ", "\t", "\u00a0", "é" * 64, "é" * 65, "😀" * 32, "😀" * 33, "\ud800", "a\udfffb", "a:b"]),
    st.sampled_from(HOSTILE_TEXT),
)


@st.composite
def record(draw: st.DrawFn, position: int) -> tuple[bytes, str]:
    """The record's bytes, and the Value's JSON text (for the independent sum)."""
    value = draw(NUMBER_TEXT)
    hierarchy = {level: draw(LEVEL_VALUE) for level in LEVELS}
    trade_id = draw(
        st.one_of(st.just("trade"), st.text(max_size=300), st.sampled_from(["\ud800", "#stats", *HOSTILE_TEXT]))
    )
    text = (
        f'{{"TradeID": {json.dumps(f"{trade_id}-{position}")}, "Version": {draw(VERSION_TEXT)}, '
        f'"Value": {value}, "Timestamp": {draw(NUMBER_TEXT)}, "Hierarchy": {json.dumps(hierarchy)}}}'
    )
    return text.encode(), value


@st.composite
def batches(draw: st.DrawFn) -> list[tuple[bytes, str]]:
    return [draw(record(position)) for position in range(draw(st.integers(1, 6)))]


def assert_valid_request(operation: str, request: dict[str, Any]) -> None:
    """What botocore checks before it sends anything (types, required members, lengths).

    `validate_parameters` is botocore's parameter validation itself, the very check a client
    with `Config(parameter_validation=False)` skips. The state function's statements are sent that
    way (`function_support.aws.state_update_client`): this test is where they are validated,
    over statements `state_write_values` built from edge-case records. Their shape is fixed and
    every value is what boto3's `TypeSerializer` makes of it (`expected_item`) or a
    string, so nothing left unvalidated depends on the record beyond what is generated here.
    """
    shape = DYNAMODB.operation_model(operation).input_shape
    assert shape is not None
    validate_parameters(request, shape)


def expected_item(message: TradeMessage, writer: str) -> dict[str, Any]:
    """The StateTable item writing `message` must leave, as boto3's `TypeSerializer` makes each value."""
    serializer = TypeSerializer()
    item = {
        "TradeID": serializer.serialize(message.trade_id),
        "Version": serializer.serialize(message.version),
        "Value": serializer.serialize(dynamodb_number(message.value)),
        "Hierarchy": serializer.serialize(dict(zip(LEVELS, message.hierarchy, strict=True))),
        "NodePath": serializer.serialize(list(message.hierarchy)),
        "ContentDigest": {"S": message.content_digest},
        "WrittenByEventId": {"S": writer},
    }
    if message.timestamp is not None:
        item["Timestamp"] = serializer.serialize(dynamodb_number(message.timestamp))
    return item


def statement_item(message: TradeMessage, writer: str) -> dict[str, Any]:
    """The item the handler's INSERT writes, and the same values set by its UPDATE, read back by the
    emulator's PartiQL parser (the statements' values are built directly, not by `TypeSerializer`):
    both must be `expected_item`, the same request on the wire as boto3 would build."""
    texts = statement_texts("StateTable")
    write = state_write_values(message, writer, LEVELS)
    insert, update = insert_statement(texts, write), update_statement(texts, write)
    for statement in (insert, update):
        assert_valid_request("BatchExecuteStatement", {"Statements": [statement]})
    inserted = parse(insert["Statement"], cast(list[dict[str, Any]], insert["Parameters"]))
    assert isinstance(inserted, Insert)
    updated = parse(update["Statement"], cast(list[dict[str, Any]], update["Parameters"]))
    assert isinstance(updated, Update)
    assigned = {path.segments[0]: value for path, value in updated.assignments}
    assert assigned | {"TradeID": write.key} == inserted.item
    assert [path.segments[0] for path in updated.removals] == ([] if message.timestamp is not None else ["Timestamp"])
    assert inserted.item == expected_item(message, writer)
    return inserted.item


def assert_renders_verbatim(text: str) -> None:
    """What the terminal renderers print for ``text`` (colours on) is ``text``, with no control character."""
    console = Console(record=True, force_terminal=True, color_system="truecolor", width=1_000, soft_wrap=True)
    console.print(untrusted_text(text, style="bold"))
    shown = console.export_text(styles=False).removesuffix("\n")
    assert shown == text
    assert UNSAFE_CHARACTERS.search(text) is None


def state_changes(accepted: list[TradeMessage]) -> list[StateChange]:
    """Every accepted message written (new trades: distinct TradeIDs), as its stream record."""
    changes = []
    for sequence, message in enumerate(accepted, start=1):
        item = statement_item(message, f"shardId-000000000000:{sequence}")
        assert item_size_bytes(item) <= MAX_ITEM_BYTES
        assert len(message.trade_id.encode()) <= DYNAMODB_MAX_KEY_BYTES
        image = decode_image(item)
        changes.append(StateChange(sequence, None, trade_state(image, LEVELS), image.get("Timestamp")))
    return changes


def independent_totals(accepted: list[tuple[TradeMessage, str]]) -> dict[str, tuple[Decimal, int]]:
    totals: dict[str, tuple[Decimal, int]] = {}
    for message, value_text in accepted:
        for depth in range(1, len(LEVELS) + 1):
            key = ":".join(message.hierarchy[:depth])
            value, count = totals.get(key, (Decimal(0), 0))
            totals[key] = (TRUTH.add(value, Decimal(value_text)), count + 1)
    return totals


@settings(max_examples=200, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_every_accepted_record_is_writable_by_every_stage_and_the_totals_are_exact(
    batch: list[tuple[bytes, str]],
) -> None:
    accepted: list[tuple[TradeMessage, str]] = []
    for data, value_text in batch:
        try:
            message = parse_trade_message(data, LEVELS, DEFAULT_VALUE_DOMAIN)
        except InvalidMessage as refused:
            assert refused.reason and len(refused.reason) < 1_000
            continue
        assert message.value == Decimal(value_text)
        accepted.append((message, value_text))
    if not accepted:
        return
    for message, _ in accepted:
        assert_renders_verbatim(message.trade_id)
        assert_renders_verbatim(":".join(message.hierarchy))
    expected = independent_totals(accepted)

    items = delta_items("label/shardId-1", state_changes([m for m, _ in accepted]), now=1.8e9, ttl=604_800)
    batches_read: list[DeltaBatch] = []
    for item, encoded in items:
        assert fits_item_limit(encoded)
        assert_valid_request("PutItem", {"TableName": "DeltaTable", "Item": encoded})
        batches_read.append(decode_delta_batch(encoded))  # as reduce and archive read the stream image
        assert batches_read[-1].deltas == item.batch.deltas

    plans = plan_transactions([u for b in batches_read for u in split_into_units(b)], with_markers=True)
    reduced: dict[str, tuple[Decimal, int]] = {}
    for plan in plans:
        actions = transaction_items(plan, "AggregateTable", IdempotencyMode.TOKEN_AND_MARKERS, 604_800)
        assert_valid_request(
            "TransactWriteItems", {"TransactItems": actions, "ClientRequestToken": plan.client_request_token}
        )
        written_keys = [
            next(iter(a.values()))["Key" if "Update" in a else "Item"]["AggregateKey"]["S"] for a in actions
        ]
        assert all(len(key.encode()) <= DYNAMODB_MAX_KEY_BYTES for key in written_keys)
        for key, delta in plan.node_deltas.items():
            value, count = reduced.get(key, (Decimal(0), 0))
            reduced[key] = (TRUTH.add(value, delta.value), count + delta.trade_count)
    assert reduced == expected

    archived = [
        ArchivedDelta(b.batch_hash, b.deltas, b.record_count, b.producer_timestamps, b.created_at, position)
        for i, b in enumerate(batches_read)
        for position in [StreamPosition("arn:aws:dynamodb:stream", f"event-{i}", str(i))]
    ]
    read_back = [parse_delta_document(encode_delta_document(delta)) for delta in archived]
    assert read_back == archived
    assert {key: (node.value, node.trade_count) for key, node in archived_totals(read_back).items()} == expected
