"""Secure by default (issue 26): alarms that tell someone, a quarantine that expires, tables that
cannot be dropped by accident, and, as settings, a customer-managed key and Object Lock.

The default template is the session's; the hardened one has every optional protection on, and
must stay as clean under cdk-nag and cfn-lint as the default.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Annotations, Match, Template

from stacks import ExactlyOnceAggregationStack
from stacks.template_lint import lint_template
from tests.stacks.stack_helpers import (
    HANDLERS,
    PROVIDER_HANDLER,
    SETTINGS_GUARD_HANDLER,
    STATE_HANDLER,
    as_list,
    function_properties,
    resources_of_type,
    role_statements,
    synthesize,
    table_logical_id,
)

ADMIN = "arn:aws:iam::111122223333:role/KeyAdmin"
PRODUCER = "arn:aws:iam::111122223333:role/Producer"
HARDENED: dict[str, Any] = {
    "alarmEmail": "oncall@example.com",
    "quarantineTtlDays": 14,
    "breakGlassRoleArn": "arn:aws:iam::111122223333:role/BreakGlass",
    "archiveObjectLockDays": 365,
    "customerManagedKey": "true",  # as the CDK CLI passes `-c customerManagedKey=true`
    "keyAdminRoleArn": ADMIN,
    "keyUserRoleArns": PRODUCER,  # the command line's comma spelling of a one-role list
    "removalPolicy": "destroy",
}


@pytest.fixture(scope="module")
def hardened() -> tuple[ExactlyOnceAggregationStack, Template]:
    return synthesize(HARDENED)


def only(template: Template, resource_type: str) -> tuple[str, dict[str, Any]]:
    ((logical_id, resource),) = resources_of_type(template, resource_type).items()
    return logical_id, resource


# --- 3. alarms notify someone --------------------------------------------------------------------


def test_every_alarm_notifies_the_topic_when_it_fires_and_when_it_recovers(template: Template) -> None:
    topic_id, _topic = only(template, "AWS::SNS::Topic")
    alarms = resources_of_type(template, "AWS::CloudWatch::Alarm")
    assert len(alarms) == 8  # four iterator ages, quarantine, conflicts, two non-INSERT skips
    for logical_id, alarm in alarms.items():
        assert alarm["Properties"]["AlarmActions"] == [{"Ref": topic_id}], logical_id
        assert alarm["Properties"]["OKActions"] == [{"Ref": topic_id}], logical_id


def test_the_topic_is_encrypted_with_a_rotated_key_cloudwatch_may_use_and_refuses_plain_http(
    template: Template,
) -> None:
    topic_id, topic = only(template, "AWS::SNS::Topic")
    key_id, key = only(template, "AWS::KMS::Key")
    assert topic["Properties"]["KmsMasterKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    assert key["Properties"]["EnableKeyRotation"] is True
    (cloudwatch,) = [
        s for s in key["Properties"]["KeyPolicy"]["Statement"] if s.get("Sid") == "CloudWatchPublishesAlarms"
    ]
    assert cloudwatch["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert set(cloudwatch["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}
    _policy_id, policy = only(template, "AWS::SNS::TopicPolicy")
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in statements
    )
    (publish,) = [s for s in statements if s["Effect"] == "Allow"]
    assert publish["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert publish["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}
    assert template.to_json()["Outputs"]["AlarmTopicArn"]["Value"] == {"Ref": topic_id}


def test_no_subscription_by_default_and_an_email_one_when_configured(
    template: Template, hardened: tuple[ExactlyOnceAggregationStack, Template]
) -> None:
    assert resources_of_type(template, "AWS::SNS::Subscription") == {}
    topic_id, _topic = only(hardened[1], "AWS::SNS::Topic")
    _id, subscription = only(hardened[1], "AWS::SNS::Subscription")
    assert subscription["Properties"] == {
        "Endpoint": "oncall@example.com",
        "Protocol": "email",
        "TopicArn": {"Ref": topic_id},
    }


# --- 4. the quarantine expires; tables are protected from deletion ------------------------------


@pytest.mark.parametrize(("overrides", "days"), [({}, 30), (HARDENED, 14)])
def test_quarantined_records_expire_and_the_alarm_fires_long_before(
    template: Template, hardened: tuple[ExactlyOnceAggregationStack, Template], overrides: dict[str, Any], days: int
) -> None:
    synthesized = hardened[1] if overrides else template
    quarantine = resources_of_type(synthesized, "AWS::DynamoDB::Table")[table_logical_id(synthesized, "RecordId")]
    assert quarantine["Properties"]["TimeToLiveSpecification"] == {"AttributeName": "ExpiresAt", "Enabled": True}
    assert function_properties(synthesized, STATE_HANDLER)["Environment"]["Variables"]["QUARANTINE_TTL_DAYS"] == str(
        days
    )
    (alarm,) = [
        a["Properties"]
        for a in resources_of_type(synthesized, "AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") == "QuarantinedRecords"
    ]
    # The first quarantined record raises it within its evaluation window: minutes against days.
    seconds_to_fire = alarm["Period"] * alarm["EvaluationPeriods"]
    assert seconds_to_fire * 1000 <= days * 86_400
    assert alarm["Threshold"] == 0 and alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["AlarmActions"] and alarm["OKActions"]


@pytest.mark.parametrize(
    ("removal_policy", "setting", "protected"),
    [
        ("retain", None, True),  # the default: retained tables are protected
        ("destroy", None, False),
        ("destroy", True, True),
        ("retain", "false", False),
    ],
)
def test_deletion_protection_follows_the_removal_policy_unless_set(
    removal_policy: str, setting: Any, protected: bool
) -> None:
    overrides: dict[str, Any] = {"removalPolicy": removal_policy}
    if setting is not None:
        overrides["tableDeletionProtection"] = setting
    _stack, template = synthesize(overrides)
    tables = resources_of_type(template, "AWS::DynamoDB::Table")
    assert len(tables) == 4
    assert {t["Properties"]["DeletionProtectionEnabled"] for t in tables.values()} == {protected}


def test_the_default_template_protects_every_table(template: Template) -> None:
    tables = resources_of_type(template, "AWS::DynamoDB::Table").values()
    assert {t["Properties"]["DeletionProtectionEnabled"] for t in tables} == {True}


# --- 6. Object Lock ------------------------------------------------------------------------------


def test_object_lock_is_off_by_default_and_on_for_the_archive_bucket_when_set(
    template: Template, hardened: tuple[ExactlyOnceAggregationStack, Template]
) -> None:
    for bucket in resources_of_type(template, "AWS::S3::Bucket").values():
        assert "ObjectLockEnabled" not in bucket["Properties"]
    locked = [
        b["Properties"]
        for b in resources_of_type(hardened[1], "AWS::S3::Bucket").values()
        if "ObjectLockEnabled" in b["Properties"]
    ]
    assert len(locked) == 1 and locked[0]["ObjectLockEnabled"] is True
    assert "LoggingConfiguration" in locked[0]  # the archive bucket (its access is logged)
    archive = [
        h
        for h in HANDLERS.values()
        if "ARCHIVE_BUCKET" in function_properties(hardened[1], h)["Environment"]["Variables"]
    ]
    variables = function_properties(hardened[1], archive[0])["Environment"]["Variables"]
    assert variables["ARCHIVE_OBJECT_LOCK_DAYS"] == "365"


# --- 7. the customer-managed key -----------------------------------------------------------------


def key_policy(template: Template) -> tuple[str, list[dict[str, Any]]]:
    key_id, key = only(template, "AWS::KMS::Key")
    statements: list[dict[str, Any]] = key["Properties"]["KeyPolicy"]["Statement"]
    return key_id, statements


def test_the_data_key_encrypts_stream_tables_archive_logs_and_topic(
    hardened: tuple[ExactlyOnceAggregationStack, Template],
) -> None:
    template = hardened[1]
    key_id, key = only(template, "AWS::KMS::Key")
    arn = {"Fn::GetAtt": [key_id, "Arn"]}
    assert key["Properties"]["EnableKeyRotation"] is True
    assert key["DeletionPolicy"] == "Retain", "the archive bucket is retained, so is the key it needs"
    _id, stream = only(template, "AWS::Kinesis::Stream")
    assert stream["Properties"]["StreamEncryption"] == {"EncryptionType": "KMS", "KeyId": arn}
    for table in resources_of_type(template, "AWS::DynamoDB::Table").values():
        assert table["Properties"]["SSESpecification"] == {"KMSMasterKeyId": arn, "SSEEnabled": True, "SSEType": "KMS"}
    log_groups = resources_of_type(template, "AWS::Logs::LogGroup").values()
    assert log_groups and all(group["Properties"]["KmsKeyId"] == arn for group in log_groups)
    (archive,) = [
        b
        for b in resources_of_type(template, "AWS::S3::Bucket").values()
        if "LoggingConfiguration" in b["Properties"]  # the archive bucket, not the access-log bucket
    ]
    (rule,) = archive["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"] == {"KMSMasterKeyID": arn, "SSEAlgorithm": "aws:kms"}
    _topic_id, topic = only(template, "AWS::SNS::Topic")
    assert topic["Properties"]["KmsMasterKeyId"] == arn


def test_the_key_policy_names_only_the_stacks_roles_an_administrator_and_the_configured_users(
    hardened: tuple[ExactlyOnceAggregationStack, Template],
) -> None:
    template = hardened[1]
    _key_id, statements = key_policy(template)
    principals = [s["Principal"] for s in statements]
    assert {"AWS": ADMIN} in principals and {"AWS": PRODUCER} in principals
    text = json.dumps(statements)
    assert ":root" not in text, "the account is not trusted as a whole"
    (admin,) = [s for s in statements if s["Principal"] == {"AWS": ADMIN}]
    assert admin["Action"] == "kms:*"
    role_ids = {
        function_properties(template, handler)["Role"]["Fn::GetAtt"][0]: handler
        for handler in [*HANDLERS.values(), SETTINGS_GUARD_HANDLER, PROVIDER_HANDLER]
    }
    named_roles = {
        principal["Fn::GetAtt"][0]
        for s in statements
        for principal in as_list(s["Principal"].get("AWS", []))
        if isinstance(principal, dict) and "Fn::GetAtt" in principal
    }
    assert named_roles == set(role_ids), "exactly the six functions' roles (data, or only their own environment)"
    for statement in statements:
        if statement["Principal"] in ({"AWS": ADMIN},) or "Service" in statement["Principal"]:
            continue
        if statement.get("Sid") == "CloudFormationManagesTheKey":  # administers the key; no data use
            assert not {"kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey*"} & set(statement["Action"])
            continue
        assert "kms:ViaService" in statement["Condition"]["StringEquals"], statement.get("Sid")
    services = {json.dumps(s["Principal"]["Service"]) for s in statements if "Service" in s["Principal"]}
    logs = {"Fn::Join": ["", ["logs.", {"Ref": "AWS::Region"}, ".amazonaws.com"]]}
    assert services == {json.dumps("cloudwatch.amazonaws.com"), json.dumps(logs)}


def test_the_data_key_encrypts_every_functions_environment_and_each_role_may_decrypt_its_own(
    hardened: tuple[ExactlyOnceAggregationStack, Template],
) -> None:
    """checkov's CKV_AWS_173 with `customerManagedKey`: the environment variables under the stack's key.

    CloudFormation's role has Lambda encrypt them and create the roles' grant (kms:ViaService lambda);
    the roles may decrypt through Lambda only, and nothing more than decrypt.
    """
    template = hardened[1]
    key_id, statements = key_policy(template)
    functions = resources_of_type(template, "AWS::Lambda::Function")
    assert len(functions) == 6
    for logical_id, function in functions.items():
        assert function["Properties"]["KmsKeyArn"] == {"Fn::GetAtt": [key_id, "Arn"]}, logical_id
    (read,) = [s for s in statements if s.get("Sid") == "FunctionsReadTheirEnvironment"]
    assert read["Action"] == "kms:Decrypt"
    roles = {principal["Fn::GetAtt"][0] for principal in read["Principal"]["AWS"]}
    assert roles == {function["Properties"]["Role"]["Fn::GetAtt"][0] for function in functions.values()}
    lambda_service = {"Fn::Join": ["", ["lambda.", {"Ref": "AWS::Region"}, ".amazonaws.com"]]}
    assert read["Condition"] == {"StringEquals": {"kms:ViaService": [lambda_service]}}
    (deploy,) = [s for s in statements if s.get("Sid") == "CloudFormationCreatesEncryptedResources"]
    assert lambda_service in deploy["Condition"]["StringEquals"]["kms:ViaService"]
    assert {"kms:Encrypt", "kms:CreateGrant"} <= set(deploy["Action"])


def test_without_the_setting_nothing_but_the_topic_uses_a_customer_managed_key(template: Template) -> None:
    _key_id, statements = key_policy(template)
    assert {s.get("Sid") for s in statements} >= {"CloudWatchPublishesAlarms"}
    _id, stream = only(template, "AWS::Kinesis::Stream")
    assert stream["Properties"]["StreamEncryption"] == {"EncryptionType": "KMS", "KeyId": "alias/aws/kinesis"}
    for table in resources_of_type(template, "AWS::DynamoDB::Table").values():
        assert "KMSMasterKeyId" not in table["Properties"]["SSESpecification"]
    for group in resources_of_type(template, "AWS::Logs::LogGroup").values():
        assert "KmsKeyId" not in group["Properties"]
    for function in resources_of_type(template, "AWS::Lambda::Function").values():
        assert "KmsKeyArn" not in function["Properties"]  # Lambda's own key for the environment
    for handler in HANDLERS.values():
        assert not [s for s in role_statements(template, handler) if "kms:" in json.dumps(s["Action"])]


def test_the_hardened_stack_is_clean_under_cdk_nag_and_cfn_lint(
    hardened: tuple[ExactlyOnceAggregationStack, Template],
) -> None:
    stack, template = hardened
    annotations = Annotations.from_stack(stack)
    findings = annotations.find_error("*", Match.string_like_regexp("AwsSolutions-.*")) + annotations.find_warning(
        "*", Match.string_like_regexp("AwsSolutions-.*")
    )
    assert findings == [], [finding.entry.data for finding in findings]
    assert lint_template(json.dumps(template.to_json())) == []
