"""The DeltaTable item's one encoder and decoder: exact numbers both ways."""

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings

from aggregation.delta_items import DeltaItem, decode_delta_batch, decode_stream_run, encode_delta_item
from aggregation.deltas import NodeDelta
from aggregation.stream_images import ImageDecodingError
from aggregation.stream_positions import StreamRun
from aggregation.transactions import DeltaBatch
from tests.lambdas.delta_strategies import delta_items

RUN = StreamRun("label/shardId-1", 1_000, 1_009)


def item(**deltas: NodeDelta) -> DeltaItem:
    batch = DeltaBatch(RUN.batch_hash, deltas, 10, (Decimal("1.25"), Decimal("1E+9")), created_at=1_700_000_000)
    return DeltaItem(run=RUN, batch=batch, expires_at=1_700_604_800)


def test_round_trip_is_exact() -> None:
    original = item(
        A=NodeDelta(Decimal("12345678901234567890.123456789012345678"), 3),
        B=NodeDelta(Decimal("-1E-39"), -1),
    )
    encoded = encode_delta_item(original)
    assert encoded["Deltas"]["M"]["B"]["M"]["Value"] == {"N": "-1E-39"}
    assert decode_delta_batch(encoded) == original.batch
    assert decode_stream_run(encoded) == RUN


@settings(max_examples=50, deadline=None)
@given(delta_items())
def test_any_item_decodes_to_the_batch_it_encodes(original: DeltaItem) -> None:
    encoded = encode_delta_item(original)
    decoded = decode_delta_batch(encoded)
    assert decoded == original.batch
    assert decode_stream_run(encoded) == original.run
    written = {key: Decimal(node["M"]["Value"]["N"]) for key, node in encoded["Deltas"]["M"].items()}
    assert {key: str(delta.value) for key, delta in decoded.deltas.items()} == {
        key: str(value) for key, value in written.items()
    }, "each value read is the very number written, digits and exponent"


def test_identity_must_be_the_runs() -> None:
    with pytest.raises(ValueError, match="identity"):
        DeltaItem(run=RUN, batch=DeltaBatch("0" * 64, {}, 1, (), 1), expires_at=2)


@pytest.mark.parametrize(
    "broken",
    [
        {"BatchHash": {"N": "1"}},
        {"Deltas": {"M": {"A": {"M": {"TradeCount": {"N": "1"}}}}}},
        {"Deltas": {"M": {"A": {"M": {"Value": {"N": "1"}, "TradeCount": {"N": "1.5"}}}}}},
        {"ProducerTimestamps": {"L": [{"S": "x"}]}},
        {"ProducerTimestamps": {"L": [{"N": "NaN"}]}},
        {"ProducerTimestamps": {"N": "1"}},
        {"Deltas": {"L": []}},
        {"Deltas": {"M": {"A": {"L": [{"N": "1"}]}}}},
        {"Deltas": {"M": {"A": {"M": {"Value": {"N": "1"}}}}}},
        {"Deltas": {"M": {"A": {"M": {"Value": {"S": "1"}, "TradeCount": {"N": "1"}}}}}},
        {"Deltas": {"M": {"A": {"M": {"Value": {"N": "Infinity"}, "TradeCount": {"N": "1"}}}}}},
        {"Deltas": {"M": {"A": {"M": {"Value": {"N": "1"}, "TradeCount": {"N": 1}}}}}},
        {"Deltas": {"M": {"A": {"S": "x", "M": {"Value": {"N": "1"}, "TradeCount": {"N": "1"}}}}}},
        {"Deltas": {"M": {"A": "x"}}},
        {"RecordCount": {"S": "10"}},
    ],
)
def test_a_malformed_image_is_refused(broken: dict[str, Any]) -> None:
    with pytest.raises(ImageDecodingError):
        decode_delta_batch(encode_delta_item(item()) | broken)
