"""The archive's bucket and role policies decided for a request, as AWS decides within one account.

Action, Resource and Condition are matched by the local IAM check's own evaluation
(`local.emulator.iam_check.statement_applies`: ``*`` and ``?`` wildcards, actions
case-insensitively, its condition operators with ``IfExists``, a negated operator holding on an
absent key), so the tests and the emulator share one implementation. This module adds what the
emulator's check leaves out: a resource policy's ``Principal`` (``*``, ``{"AWS": "*"}``,
``{"AWS": <arn or list>}``), and the decision over a resource policy and an identity policy
together. The request states its context in full: a key it does not give is absent (so any key a
statement names can be evaluated); the request's principal is its ``aws:PrincipalArn``. Anything
else raises `UnsupportedPolicy` (or the check's `Unevaluable`) instead of being silently ignored.

Decision order as AWS documents it for one account: an explicit Deny in any policy wins; else
an Allow in any policy allows; else the request is implicitly denied.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from local.emulator import iam_check

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


def _principal_matches(statement: Mapping[str, Any], request: Request, identity_policy: bool) -> bool:
    if identity_policy:
        return "Principal" not in statement  # an identity policy applies to its own role
    principal = statement.get("Principal")
    if principal == "*":
        return True
    if not isinstance(principal, dict) or set(principal) - {"AWS"}:
        raise UnsupportedPolicy(f"Principal {principal!r}")
    return any(candidate in ("*", request.principal) for candidate in _as_list(principal["AWS"]))


def statement_applies(statement: Mapping[str, Any], request: Request, identity_policy: bool = False) -> bool:
    if not _principal_matches(statement, request, identity_policy):
        return False
    context = {key.lower(): value for key, value in {"aws:PrincipalArn": request.principal, **request.context}.items()}
    stated_keys = {key.lower() for keys in statement.get("Condition", {}).values() for key in keys}
    return iam_check.statement_applies(
        {element: value for element, value in statement.items() if element != "Principal"},
        iam_check.Authorization(request.action, request.resource),
        context,
        known_keys=stated_keys,
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
