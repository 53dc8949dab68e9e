"""A small, honest evaluator for the subset of IAM policy semantics the archive's policies use.

Supported: Effect Allow/Deny; Principal ``*`` / ``{"AWS": "*"}`` / ``{"AWS": <arn or list>}``;
Action and Resource with ``*`` and ``?`` wildcards (actions case-insensitively); condition
operators ``Null``, ``Bool``, ``StringEquals``, ``StringLikeIfExists``, ``ArnNotEquals``,
``NumericLessThan`` (several keys in one operator, and several operators, must all hold; a list
of values means any of them, and for the negated ``ArnNotEquals`` none of them). The request's
principal is its ``aws:PrincipalArn``. Anything
else raises `UnsupportedPolicy` instead of being silently ignored.

Decision order as AWS documents it for one account: an explicit Deny in any policy wins; else
an Allow in any policy allows; else the request is implicitly denied.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

EXPLICIT_DENY = "ExplicitDeny"
ALLOW = "Allow"
IMPLICIT_DENY = "ImplicitDeny"


class UnsupportedPolicy(ValueError):
    """The policy uses something this evaluator does not implement."""


@dataclass(frozen=True)
class Request:
    principal: str
    action: str
    resource: str
    context: Mapping[str, str] = field(default_factory=dict)


def resolve(value: Any, arns: Mapping[str, str]) -> Any:
    """Resolve the CloudFormation intrinsics CDK emits here: Ref, Fn::GetAtt [..., Arn], Fn::Join."""
    if isinstance(value, list):
        return [resolve(item, arns) for item in value]
    if not isinstance(value, dict):
        return value
    if "Ref" in value:
        if value["Ref"] == "AWS::Partition":
            return "aws"
        return arns[value["Ref"]]
    if "Fn::GetAtt" in value:
        logical_id, attribute = value["Fn::GetAtt"]
        if attribute != "Arn":
            raise UnsupportedPolicy(f"Fn::GetAtt {attribute}")
        return arns[logical_id]
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(str(resolve(part, arns)) for part in parts)
    return {key: resolve(item, arns) for key, item in value.items()}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def wildcard_matches(pattern: str, value: str, ignore_case: bool = False) -> bool:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.IGNORECASE if ignore_case else 0) is not None


def _principal_matches(statement: Mapping[str, Any], request: Request, identity_policy: bool) -> bool:
    if identity_policy:
        return "Principal" not in statement  # an identity policy applies to its own role
    principal = statement.get("Principal")
    if principal == "*":
        return True
    if not isinstance(principal, dict) or set(principal) - {"AWS"}:
        raise UnsupportedPolicy(f"Principal {principal!r}")
    return any(candidate in ("*", request.principal) for candidate in _as_list(principal["AWS"]))


def _condition_holds(operator: str, key: str, expected: Any, context: Mapping[str, str]) -> bool:
    present = key in context
    values = [str(v) for v in _as_list(expected)]
    if operator == "Null":
        return any((value.lower() == "true") == (not present) for value in values)
    if operator == "StringLikeIfExists":
        return not present or any(wildcard_matches(value, context[key]) for value in values)
    if not present:
        return False  # a condition on an absent key does not hold (negated operators included)
    actual = context[key]
    if operator == "ArnNotEquals":
        return all(actual != value for value in values)
    if operator == "Bool":
        return any(actual.lower() == value.lower() for value in values)
    if operator == "StringEquals":
        return actual in values
    if operator == "NumericLessThan":
        return any(float(actual) < float(value) for value in values)
    raise UnsupportedPolicy(f"condition operator {operator}")


def statement_applies(statement: Mapping[str, Any], request: Request, identity_policy: bool = False) -> bool:
    if set(statement) - {"Sid", "Effect", "Principal", "Action", "Resource", "Condition"}:
        raise UnsupportedPolicy(f"statement elements {sorted(statement)}")
    if not _principal_matches(statement, request, identity_policy):
        return False
    if not any(wildcard_matches(a, request.action, ignore_case=True) for a in _as_list(statement["Action"])):
        return False
    if not any(wildcard_matches(r, request.resource) for r in _as_list(statement["Resource"])):
        return False
    context = {"aws:PrincipalArn": request.principal, **request.context}
    return all(
        _condition_holds(operator, key, expected, context)
        for operator, keys in statement.get("Condition", {}).items()
        for key, expected in keys.items()
    )


def decide(
    resource_policy: Sequence[Mapping[str, Any]], identity_policy: Sequence[Mapping[str, Any]], request: Request
) -> str:
    statements = [(s, False) for s in resource_policy] + [(s, True) for s in identity_policy]
    applicable = [(s["Effect"], statement_applies(s, request, identity)) for s, identity in statements]
    if any(effect == "Deny" and applies for effect, applies in applicable):
        return EXPLICIT_DENY
    if any(effect == "Allow" and applies for effect, applies in applicable):
        return ALLOW
    return IMPLICIT_DENY
