"""Exact decoding of stream images: every number's text becomes the identical Decimal."""

from decimal import Decimal

import pytest

from aggregation.stream_images import ImageDecodingError, decode_image, decode_number


@pytest.mark.parametrize(
    "text",
    [
        "1E-39",
        "0.000000000000000000000000000000000000001",  # 1E-39 in 41 characters
        "12345678901234567890.123456789012345678",  # 38 significant digits
        "-99999999999999999999999999999999999999E+87",
        "1.000000000000000000000000000000000000000000000",  # one digit, a long coefficient
    ],
)
def test_numbers_decode_to_the_identical_decimal_whatever_their_length(text: str) -> None:
    decoded = decode_number(text)
    assert decoded == Decimal(text) and str(decoded) == str(Decimal(text))
    assert not decoded.is_zero()


def test_every_attribute_type_decodes() -> None:
    image = {
        "S": {"S": "x"},
        "N": {"N": "1.50"},
        "B": {"B": "AAE="},
        "BOOL": {"BOOL": True},
        "NULL": {"NULL": True},
        "L": {"L": [{"N": "1"}, {"S": "a"}]},
        "M": {"M": {"Inner": {"N": "-2"}}},
        "SS": {"SS": ["a", "b"]},
        "NS": {"NS": ["1", "2.0"]},
        "BS": {"BS": ["AA=="]},
    }
    assert decode_image(image) == {
        "S": "x",
        "N": Decimal("1.50"),
        "B": b"\x00\x01",
        "BOOL": True,
        "NULL": None,
        "L": [Decimal(1), "a"],
        "M": {"Inner": Decimal(-2)},
        "SS": {"a", "b"},
        "NS": {Decimal(1), Decimal("2.0")},
        "BS": {b"\x00"},
    }
    assert decode_image(None) == {} == decode_image({})


@pytest.mark.parametrize("bad", [{"N": "NaN"}, {"N": "Infinity"}, {"N": "1x"}, {"N": 5}, {"X": "1"}, {}, "text"])
def test_anything_else_is_refused(bad: object) -> None:
    with pytest.raises(ImageDecodingError):
        decode_image({"Value": bad})
