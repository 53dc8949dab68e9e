"""The Kinesis stream's capacity mode (`streamMode`): on-demand by default, provisioned with its shard count."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Annotations, Match

from stacks import SettingsError
from stacks.template_lint import lint_template
from tests.stacks.stack_helpers import synthesize

PROVISIONED = {"mode": "provisioned", "shardCount": 4}


def test_a_provisioned_stream_has_exactly_its_shard_count_and_stays_kms_encrypted() -> None:
    stack, template = synthesize({"streamMode": PROVISIONED})
    assert lint_template(json.dumps(template.to_json())) == []
    nag = Annotations.from_stack(stack).find_error("*", Match.string_like_regexp("AwsSolutions-.*"))
    assert nag == [], [error.entry.data for error in nag]
    template.resource_count_is("AWS::Kinesis::Stream", 1)
    template.has_resource_properties(
        "AWS::Kinesis::Stream",
        {
            "StreamModeDetails": {"StreamMode": "PROVISIONED"},
            "ShardCount": 4,
            "StreamEncryption": {"EncryptionType": "KMS", "KeyId": "alias/aws/kinesis"},
            "RetentionPeriodHours": 24,  # the 24 hours every stage's TTL and alarm are sized for
        },
    )


def test_too_few_provisioned_shards_for_the_target_rate_are_refused_with_the_count_to_set() -> None:
    """4 shards take 4,000 records a second: 10,000 msg/s need 10, and the planner suggests 15 (70 %)."""
    with pytest.raises(SettingsError) as refused:
        synthesize({"streamMode": PROVISIONED, "targetMessagesPerSecond": 10_000, "stateParallelizationFactor": 10})
    message = str(refused.value)
    assert "4 provisioned Kinesis shards are too few" in message
    assert "raise streamMode shardCount to 15" in message
