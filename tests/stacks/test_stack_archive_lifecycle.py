"""`archiveLifecycle`: archived delta objects move to a cheaper storage class after N days, or stay."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk.assertions import Annotations, Match, Template

from stacks.template_lint import lint_template
from tests.stacks.stack_helpers import resources_of_type, synthesize


def archive_rules(template: Template) -> dict[str, Any]:
    buckets = resources_of_type(template, "AWS::S3::Bucket")
    (archive,) = [b for b in buckets.values() if b["Properties"].get("LoggingConfiguration")]
    return {rule["Id"]: rule for rule in archive["Properties"]["LifecycleConfiguration"]["Rules"]}


def test_by_default_archived_deltas_stay_in_standard(template: Template) -> None:
    rules = archive_rules(template)
    assert "MoveArchivedDeltas" not in rules
    assert not [rule for rule in rules.values() if "Transitions" in rule]


def test_a_transition_moves_only_the_delta_objects_after_the_days_set() -> None:
    stack, template = synthesize({"archiveLifecycle": {"storageClass": "GLACIER_IR", "afterDays": 90}})
    assert lint_template(json.dumps(template.to_json())) == []
    nag = Annotations.from_stack(stack).find_error("*", Match.string_like_regexp("AwsSolutions-.*"))
    assert nag == [], [error.entry.data for error in nag]
    rule = archive_rules(template)["MoveArchivedDeltas"]
    assert rule["Status"] == "Enabled"
    assert rule["Prefix"] == "deltas/", "the registry stays where it is read"
    assert rule["Transitions"] == [{"StorageClass": "GLACIER_IR", "TransitionInDays": 90}]
    assert "ExpirationInDays" not in rule and "ObjectSizeGreaterThan" not in rule, "kept for ever; S3's 128 KB floor"
