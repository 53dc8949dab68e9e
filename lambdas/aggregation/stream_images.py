"""Exact decoding of DynamoDB stream images, as Lambda delivers them (DynamoDB JSON).

Stream records carry item images in DynamoDB's typed JSON (`{"N": "1E-39"}`). Decoders
of libraries have differed in how they turn a number into a Python value (older
Powertools v3 releases cut numbers longer than 38 characters, so a valid `1E-39` written
with many zeros could come back as 0); an aggregate that is exact to the last decimal
cannot depend on which release the Lambda layer holds. So the functions decode images
here: a number's text becomes a `Decimal` through `Decimal(text)`, which is exact whatever
its length or exponent (it never consults a context), and nothing else is interpreted.
"""

import base64
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any


class ImageDecodingError(ValueError):
    """An attribute value that is not DynamoDB typed JSON."""


def decode_number(text: Any) -> Decimal:
    """A DynamoDB number's text as the identical `Decimal` (refuses anything not finite)."""
    if not isinstance(text, str):
        raise ImageDecodingError(f"a number must be sent as text, got {text!r}")
    try:
        number = Decimal(text)
    except InvalidOperation:
        raise ImageDecodingError(f"{text!r} is not a number") from None
    if not number.is_finite():
        raise ImageDecodingError(f"{text!r} is not a finite number")
    return number


def decode_attribute(value: Mapping[str, Any]) -> Any:
    """One typed attribute value: S, N, B, BOOL, NULL, L, M and the sets SS, NS, BS."""
    if not isinstance(value, Mapping) or len(value) != 1:
        raise ImageDecodingError(f"not a DynamoDB attribute value: {value!r}")
    ((kind, payload),) = value.items()
    match kind:
        case "S":
            return str(payload)
        case "N":
            return decode_number(payload)
        case "B":
            return base64.b64decode(payload)
        case "BOOL":
            return bool(payload)
        case "NULL":
            return None
        case "L":
            return [decode_attribute(item) for item in payload]
        case "M":
            return decode_image(payload)
        case "SS":
            return {str(item) for item in payload}
        case "NS":
            return {decode_number(item) for item in payload}
        case "BS":
            return {base64.b64decode(item) for item in payload}
    raise ImageDecodingError(f"unknown DynamoDB attribute type {kind!r}")


def decode_image(image: Mapping[str, Any] | None) -> dict[str, Any]:
    """A whole image (attribute name -> typed value); an absent image is empty."""
    if not image:
        return {}
    return {str(name): decode_attribute(value) for name, value in image.items()}
