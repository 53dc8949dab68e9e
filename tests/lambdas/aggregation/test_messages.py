"""Validation follows the rules of docs/design.md ("Messages"), rule by rule."""

import json
from decimal import Decimal

import pytest
from boto3.dynamodb.types import TypeSerializer
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregation.exact import dynamodb_number
from aggregation.messages import InvalidMessage, parse_trade_message
from aggregation.value_domain import ValueDomain

LEVELS = ("RiskType", "TradeDesk", "Region")


def message(**overrides: object) -> dict[str, object]:
    base: dict[str, object] = {
        "TradeID": "0d957268-2913-4dbb-b359-5ec5ff732cac",
        "Value": 34624.51,
        "Version": 3,
        "Timestamp": 1616413258.8997078,
        "Hierarchy": {"RiskType": "Delta", "Region": "AMER", "TradeDesk": "FXSpot"},
    }
    base.update(overrides)
    return base


def encode(document: object) -> bytes:
    return json.dumps(document).encode()


def test_valid_message_parses_numbers_exactly_from_the_json_text() -> None:
    raw = b'{"TradeID":"t","Value":123456789012345678.1000000001,"Version":0,"Timestamp":1.5,'
    raw += b'"Hierarchy":{"RiskType":"Delta","TradeDesk":"FXSpot","Region":"AMER"},"Extra":[1]}'
    parsed = parse_trade_message(raw, LEVELS)
    assert parsed.value == Decimal("123456789012345678.1000000001")
    assert parsed.version == 0
    assert parsed.timestamp == Decimal("1.5")
    assert parsed.hierarchy == ("Delta", "FXSpot", "AMER")


def test_integer_value_and_extra_hierarchy_levels_are_accepted() -> None:
    hierarchy = {"RiskType": "Vega", "TradeDesk": "Rates", "Region": "EMEA", "Book": "ignored"}
    parsed = parse_trade_message(encode(message(Value=-12, Hierarchy=hierarchy)), LEVELS)
    assert parsed.value == Decimal(-12)
    assert parsed.hierarchy == ("Vega", "Rates", "EMEA")


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\xff\xfe{}", "not UTF-8"),
        (b"{not json", "not JSON"),
        (b"\xef\xbb\xbf" + encode(message()), "UTF-8 BOM"),  # refused as json.loads refuses it
        (b"[1, 2]", "not an object"),
        (b'"a string"', "not an object"),
        (encode(message(TradeID=None)), "TradeID is missing"),
        (encode({k: v for k, v in message().items() if k != "TradeID"}), "TradeID is missing"),
        (encode(message(TradeID="")), "TradeID is empty"),
        (encode(message(TradeID="x" * 257)), "longer than 256"),
        (encode(message(TradeID=17)), "TradeID is missing or not a string"),
        (encode(message(Version=3.0)), "Version is missing or not a JSON integer"),
        (encode(message(Version="3")), "Version is missing or not a JSON integer"),
        (encode(message(Version=True)), "Version is missing or not a JSON integer"),
        (encode(message(Version=-1)), "Version is negative"),
        (encode(message(Version=10**39 + 1)), "more than 38 digits"),
        (encode(message(Version=10**38)), "more than 38 digits"),
        (encode(message(Version=int("9" * 401))), "more than 38 digits"),
        (encode(message(Value="12.5")), "Value is missing or not a JSON number"),
        (encode(message(Value=None)), "Value is missing"),
        (encode(message(Value=False)), "Value is missing or not a JSON number"),
        (b'{"TradeID":"t","Value":NaN,"Version":1}', "not a finite number"),
        (b'{"TradeID":"t","Value":Infinity,"Version":1}', "not a finite number"),
        (b'{"TradeID":"t","Value":-Infinity,"Version":1}', "not a finite number"),
        (encode(message(Value=int("1" * 39))), "not representable"),
        (b'{"TradeID":"t","Version":1,"Value":1.00000000000000000000000000000000000001}', "not representable"),
        (b'{"TradeID":"t","Version":1,"Value":1e200}', "not representable"),
        (b'{"TradeID":"t","Version":1,"Value":1e999999999}', "not representable"),
        (b'{"TradeID":"t","Version":1,"Value":-1e-999999999}', "not representable"),
        (b'{"TradeID":"t","Version":1,"Value":1e9999999999999999999}', "exponent no decimal can hold"),
        (encode(message(Value=int("1" * 401))), "not representable"),
        (encode(message()).replace(b"34624.51", b"1" * 5000), "not JSON"),  # Python's 4,300-digit limit on integers
        (encode(message()).replace(b"34624.51", b"1." + b"1" * 400), "not representable"),
        (encode(message(Timestamp="now")), "Timestamp is missing or not a JSON number"),
        (encode({k: v for k, v in message().items() if k != "Timestamp"}), "Timestamp is missing"),
        (encode(message(Hierarchy=None)), "Hierarchy is missing or not an object"),
        (encode(message(Hierarchy=["Delta"])), "Hierarchy is missing or not an object"),
        (encode(message(Hierarchy={"RiskType": "Delta", "TradeDesk": "FXSpot"})), "Hierarchy.Region is missing"),
        (encode(message(Hierarchy={"RiskType": "", "TradeDesk": "F", "Region": "A"})), "RiskType is empty"),
        (encode(message(Hierarchy={"RiskType": "D:x", "TradeDesk": "F", "Region": "A"})), "contains ':'"),
        (encode(message(Hierarchy={"RiskType": "D" * 129, "TradeDesk": "F", "Region": "A"})), "longer than 128"),
        (encode(message(Hierarchy={"RiskType": "é" * 65, "TradeDesk": "F", "Region": "A"})), "128 bytes in UTF-8"),
        (encode(message(Value=10**18)), "Value 1000000000000000000 is outside the aggregatable domain"),
        (b'{"TradeID":"t","Version":1,"Value":1E+30}', "more than 18 integer digits (valueIntegerDigits)"),
        (b'{"TradeID":"t","Version":1,"Value":-1E-11}', "more than 10 fraction digits (valueFractionDigits)"),
        (b'{"TradeID":"\\ud800","Version":1,"Value":1}', "TradeID is not valid Unicode"),
        (encode(message(Hierarchy={"RiskType": "\udfff", "TradeDesk": "F", "Region": "A"})), "not valid Unicode"),
        (encode(message(Hierarchy={"RiskType": 5, "TradeDesk": "F", "Region": "A"})), "not a string"),
        (encode(message(TradeID="t\x1b[2J")), "TradeID contains a control or bidirectional-control character (U+001B)"),
        (encode(message(TradeID="t\x00")), "TradeID contains a control or bidirectional-control character (U+0000)"),
        (encode(message(TradeID="t\tx")), "(U+0009)"),
        (encode(message(TradeID="t\x7f")), "(U+007F)"),
        (encode(message(TradeID="t\x9b2J")), "(U+009B)"),  # the C1 control sequence introducer
        (encode(message(TradeID="\u202eHCTAM")), "TradeID contains a control or bidirectional-control character"),
        (encode(message(Hierarchy={"RiskType": "D\x1b]52;c;aGk=\x07", "TradeDesk": "F", "Region": "A"})), "U+001B"),
        (
            encode(message(Hierarchy={"RiskType": "D", "TradeDesk": "F\n", "Region": "A"})),
            "Hierarchy.TradeDesk contains a control or bidirectional-control character (U+000A)",
        ),
        (encode(message(Hierarchy={"RiskType": "D", "TradeDesk": "F", "Region": "\u2066A"})), "(U+2066)"),
        (encode(message(Hierarchy={"RiskType": "D", "TradeDesk": "F", "Region": "A\u2069"})), "(U+2069)"),
        (encode(message(Hierarchy={"RiskType": "D\u202a", "TradeDesk": "F", "Region": "A"})), "(U+202A)"),
    ],
)
def test_invalid_records_are_rejected_with_their_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(InvalidMessage) as caught:
        parse_trade_message(raw, LEVELS)
    assert reason in caught.value.reason


@pytest.mark.parametrize(
    "text",
    ["\u00a0", "\u200e", "\u200f", "\u061c", "\u200d", "\u2065", "\u206a", "\u00a0\u00ff", "[/]", "[bold]x", "\\x1b"],
)
def test_characters_next_to_the_refused_ones_are_accepted(text: str) -> None:
    """Only C0, DEL, C1 and the bidirectional embeddings, overrides and isolates are refused: the
    marks (U+200E, U+200F, U+061C), joiners, neighbours of the refused ranges, markup-looking
    text and a literal backslash escape are ordinary text (the renderers show them literally)."""
    hierarchy = {"RiskType": f"R{text}", "TradeDesk": "F", "Region": "A"}
    parsed = parse_trade_message(encode(message(TradeID=f"t{text}", Hierarchy=hierarchy)), LEVELS)
    assert (parsed.trade_id, parsed.hierarchy[0]) == (f"t{text}", f"R{text}")


def test_limits_are_inclusive() -> None:
    hierarchy = {"RiskType": "R" * 128, "TradeDesk": "é" * 64, "Region": "😀" * 32}
    value = Decimal("-999999999999999999.9999999999")
    raw = encode(message(TradeID="x" * 256, Hierarchy=hierarchy, Version=10**38 - 1))
    raw = raw.replace(b"34624.51", str(value).encode())
    parsed = parse_trade_message(raw, LEVELS)
    assert parsed.value == value
    assert parsed.version == 10**38 - 1


def test_trailing_zeros_do_not_count_as_significant_digits() -> None:
    raw = encode(message()).replace(b"34624.51", b"1." + b"0" * 45)
    assert parse_trade_message(raw, LEVELS).value == Decimal(1)


def test_timestamp_beyond_dynamodb_range_is_kept_out_of_storage_not_rejected() -> None:
    raw = encode(message()).replace(b"1616413258.8997078", b"1e300")
    assert parse_trade_message(raw, LEVELS).timestamp is None


@pytest.mark.parametrize(
    ("timestamp", "kept"),
    [
        ("1616413258.8997078", True),
        ("0", True),
        ("99999999999.999999", True),
        ("1E+11", False),
        ("1E+30", False),  # would break the reduce stage's latency arithmetic
        ("-1", False),
    ],
)
def test_only_plausible_timestamps_are_kept_for_latency(timestamp: str, kept: bool) -> None:
    raw = encode(message()).replace(b"1616413258.8997078", timestamp.encode())
    parsed = parse_trade_message(raw, LEVELS)
    assert (parsed.timestamp == Decimal(timestamp)) if kept else (parsed.timestamp is None)


def test_the_value_domain_is_a_parameter() -> None:
    raw = encode(message(Value=123456))
    assert parse_trade_message(raw, LEVELS, ValueDomain(6, 2)).value == Decimal(123456)
    with pytest.raises(InvalidMessage, match="more than 5 integer digits"):
        parse_trade_message(raw, LEVELS, ValueDomain(5, 2))


@pytest.mark.parametrize("zero", ["0E+500", "-0E+300", "0E-500", "-0.000", "0." + "0" * 500, "0"])
def test_a_zero_of_any_exponent_is_the_value_zero_written_as_0(zero: str) -> None:
    """A zero's exponent is no part of its value; boto3's serializer refuses `0E+500`
    (decimal.Clamped), so a message that kept it would fail its batch on every retry."""
    raw = encode(message()).replace(b"34624.51", zero.encode()).replace(b"1616413258.8997078", zero.encode())
    parsed = parse_trade_message(raw, LEVELS)
    assert parsed.value == 0 and parsed.timestamp == 0
    assert str(parsed.value) == str(parsed.timestamp) == "0"
    assert TypeSerializer().serialize(parsed.value) == {"N": "0"}
    assert parsed.content_digest == parse_trade_message(encode(message(Value=0)), LEVELS).content_digest


@pytest.mark.parametrize(
    "timestamp",
    ["1e999999999", "1e-999999999", "1" * 401, "1." + "1" * 400, "0." + "0" * 400 + "1", "1e9999999"],
)
def test_timestamps_no_context_can_hold_are_dropped_not_raised(timestamp: str) -> None:
    raw = encode(message()).replace(b"1616413258.8997078", timestamp.encode())
    assert parse_trade_message(raw, LEVELS).timestamp is None


def test_the_largest_version_is_written_as_its_digits() -> None:
    parsed = parse_trade_message(encode(message(Version=10**38 - 1)), LEVELS)
    assert TypeSerializer().serialize(parsed.version) == {"N": "9" * 38}


@pytest.mark.parametrize(
    ("text", "kept", "written"),
    [
        ("1.50", "1.5", "1.5"),
        ("1." + "0" * 45, "1", "1"),
        ("1200", "1.2E+3", "1200"),
        ("-0.00012300", "-0.000123", "-0.000123"),
        ("1E+17", "1E+17", "100000000000000000"),
    ],
)
def test_values_are_kept_in_canonical_form_and_written_as_the_same_number(text: str, kept: str, written: str) -> None:
    parsed = parse_trade_message(encode(message()).replace(b"34624.51", text.encode()), LEVELS)
    assert str(parsed.value) == kept
    assert parsed.value == Decimal(text)
    assert TypeSerializer().serialize(dynamodb_number(parsed.value)) == {"N": written}


_MEMBERS = {
    "TradeID": '"T-1"',
    "Value": "12.5",
    "Version": "3",
    "Timestamp": "1700000000.5",
    "Hierarchy": '{"RiskType": "Credit", "TradeDesk": "Desk-1", "Region": "EU"}',
    "Source": '"producer"',
}


@settings(max_examples=60, deadline=None)
@given(
    order=st.permutations(list(_MEMBERS)),
    twice=st.sampled_from([*_MEMBERS, *(f"Hierarchy.{level}" for level in LEVELS), "Hierarchy.Book"]),
    other=st.sampled_from(['"Other"', "99", "-1", '"T-2"', "null", "{}"]),
    first=st.booleans(),
)
def test_a_record_that_names_a_key_twice_is_refused(order: list[str], twice: str, other: str, first: bool) -> None:
    """Which of two values of one key a JSON parser keeps differs (Python's json the last, others the
    first or an error), so such a record has no one meaning: the door refuses it, whichever key and
    wherever, with a reason naming the key, rather than let a parser decide (issue 38)."""
    members = dict(_MEMBERS)
    parse_trade_message(("{" + ", ".join(f'"{name}": {members[name]}' for name in order) + "}").encode(), LEVELS)
    outer, _, level = twice.partition(".")
    if level:
        pairs = [f'"{name}": "x"' for name in (*LEVELS, "Book") if name != level]
        again = [f'"{level}": "Credit"', f'"{level}": {other}']
        members["Hierarchy"] = "{" + ", ".join([*again, *pairs] if first else [*pairs, *again]) + "}"
        entries = [f'"{name}": {members[name]}' for name in order]
    else:
        entries = [f'"{name}": {members[name]}' for name in order]
        entries.insert(0 if first else len(entries), f'"{outer}": {other}')
    with pytest.raises(InvalidMessage, match=f'names the key "{level or outer}" twice'):
        parse_trade_message(("{" + ", ".join(entries) + "}").encode(), LEVELS)
