"""Lambda event filtering (FilterCriteria): which stream records reach the function.

Implements the subset of the event filter pattern language the stack and its tests use:
exact values (strings, numbers, booleans, null), `prefix`, `suffix`, `anything-but`
(values or a prefix), `numeric` comparisons, `exists`, nested objects, and OR across the
filters of one mapping. For Kinesis, `data` is matched against the record's payload
parsed as JSON (a pattern on `data` never matches a payload that is not a JSON object);
for DynamoDB Streams the record is matched as Lambda delivers it.
See https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html

Two documented rules are enforced strictly, so a pattern that would silently match nothing
(or everything) on AWS fails here too:

* DynamoDB event source mappings filter only on the record's `dynamodb` key
  ("Using event filtering with a DynamoDB event source"): `check_patterns` refuses a
  pattern naming anything else, such as `eventName`.
* `exists` matches leaf values only, not objects: ``{"NewImage": {"K": [{"exists": true}]}}``
  never matches a DynamoDB attribute (an object such as ``{"S": "..."}``); the path must go
  down to the type, ``{"K": {"S": [{"exists": true}]}}``. ``{"exists": false}`` matches where
  no leaf value is: the key is absent, or holds an object.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

_MISSING = object()

FILTERABLE_KEYS = {"dynamodb": frozenset({"dynamodb"})}
"""Per event source kind, the only top-level record keys Lambda filters on (absent: no limit)."""


class UnsupportedFilterError(ValueError):
    """A mapping's filter pattern uses what Lambda does not filter on for that source."""


def check_patterns(source_kind: str, patterns: Sequence[Mapping[str, Any]]) -> None:
    """Refuse patterns Lambda documents as unsupported for `source_kind` (`kinesis`, `dynamodb`)."""
    allowed = FILTERABLE_KEYS.get(source_kind)
    if allowed is None:
        return
    for pattern in patterns:
        unsupported = sorted(set(pattern) - allowed)
        if unsupported:
            raise UnsupportedFilterError(
                f"filter pattern {json.dumps(pattern)} names {unsupported}: Lambda filters {source_kind} "
                f"stream records only on {sorted(allowed)}"
            )


def record_matches(record: Mapping[str, Any], patterns: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the Lambda-formatted `record` passes the mapping's filters (no filters: all pass)."""
    if not patterns:
        return True
    document = _filterable_view(record)
    return any(_object_matches(document, pattern) for pattern in patterns)


def _filterable_view(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """The record as the filter sees it: Kinesis `data` decoded to JSON where it is JSON."""
    kinesis = record.get("kinesis")
    if not isinstance(kinesis, Mapping) or "data" not in kinesis:
        return record
    try:
        decoded = json.loads(base64.b64decode(kinesis["data"]))
    except ValueError:
        decoded = _MISSING
    view = {key: value for key, value in record.items() if key != "kinesis"}
    kinesis_view = {key: value for key, value in kinesis.items() if key != "data"}
    if isinstance(decoded, dict):
        kinesis_view["data"] = decoded
    view["kinesis"] = kinesis_view
    # Lambda exposes the payload of a Kinesis record as top-level `data` to the pattern.
    if isinstance(decoded, dict):
        view["data"] = decoded
    return view


def _object_matches(document: Any, pattern: Mapping[str, Any]) -> bool:
    if not isinstance(document, Mapping):
        return False
    for key, sub_pattern in pattern.items():
        value = document.get(key, _MISSING)
        if isinstance(sub_pattern, Mapping):
            if value is _MISSING or not _object_matches(value, sub_pattern):
                return False
        elif isinstance(sub_pattern, list):
            if not _value_matches_any(value, sub_pattern):
                return False
        else:
            raise ValueError(f"filter pattern for {key!r} must be an object or a list, got {sub_pattern!r}")
    return True


def _value_matches_any(value: Any, matchers: list[Any]) -> bool:
    values = value if isinstance(value, list) else [value]
    return any(_matches(candidate, matcher) for matcher in matchers for candidate in values) or (
        value is _MISSING and any(isinstance(m, Mapping) and m.get("exists") is False for m in matchers)
    )


def _matches(value: Any, matcher: Any) -> bool:
    if not isinstance(matcher, Mapping):
        return value is not _MISSING and _equal(value, matcher)
    if "exists" in matcher:
        return _is_leaf(value) is bool(matcher["exists"])
    if value is _MISSING:
        return False
    if "prefix" in matcher:
        return isinstance(value, str) and value.startswith(matcher["prefix"])
    if "suffix" in matcher:
        return isinstance(value, str) and value.endswith(matcher["suffix"])
    if "equals-ignore-case" in matcher:
        return isinstance(value, str) and value.lower() == str(matcher["equals-ignore-case"]).lower()
    if "anything-but" in matcher:
        excluded = matcher["anything-but"]
        if isinstance(excluded, Mapping):
            return not _matches(value, excluded)
        excluded_values = excluded if isinstance(excluded, list) else [excluded]
        return not any(_equal(value, e) for e in excluded_values)
    if "numeric" in matcher:
        return _numeric_matches(value, matcher["numeric"])
    raise ValueError(f"unsupported filter matcher {dict(matcher)!r}")


def _is_leaf(value: Any) -> bool:
    """A value `exists` can see: present and not an object (arrays are matched element-wise)."""
    return value is not _MISSING and not isinstance(value, Mapping)


def _equal(value: Any, expected: Any) -> bool:
    if expected is None or isinstance(expected, bool) or isinstance(value, bool):
        return value is expected
    if isinstance(expected, int | float) and isinstance(value, int | float):
        return float(value) == float(expected)
    return bool(value == expected)


_COMPARISONS = {
    "=": lambda a, b: a == b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _numeric_matches(value: Any, conditions: list[Any]) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    pairs = zip(conditions[0::2], conditions[1::2], strict=True)
    return all(_COMPARISONS[operator](float(value), float(operand)) for operator, operand in pairs)
