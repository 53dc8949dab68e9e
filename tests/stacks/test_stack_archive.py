"""The audit archive in the template: function, mapping, bucket, bucket policy, grants, output.

The emulator does not evaluate bucket policies, so the policy's logic is proven here with an
evaluator (`policy_evaluator`: the emulator's IAM statement matching, plus the bucket policy's
Principal) run over the synthesized statements, against the very requests the archive function
sends (recorded on the wire against the emulator's S3).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from aws_cdk.assertions import Template

from aggregation.archive_legacy import LEGACY_SHARD, registry_key
from archive_function import handler as archive_handler
from local.runner.inprocess import LambdaContextStub
from stacks.settings import DEFAULT_ARCHIVE_BATCHING_WINDOW_SECONDS, SettingsError
from tests.lambdas.archive_function.archive_helpers import archive_bucket_environment, delta_event
from tests.stacks.policy_evaluator import ALLOW, EXPLICIT_DENY, IMPLICIT_DENY, Request, decide, resolve
from tests.stacks.stack_helpers import (
    ARCHIVE_HANDLER,
    REDUCE_HANDLER,
    event_source_mapping,
    function_properties,
    resources_of_type,
    role_statements,
    synthesize,
    table_logical_id,
)

BUCKET_ARN = "arn:aws:s3:::archive-bucket"
ROLE_ARN = "arn:aws:iam::123456789012:role/archive-role"
SECURE = {"aws:SecureTransport": "true", "s3:TlsVersion": "1.3"}
CREATE = {**SECURE, "s3:ObjectCreationOperation": "true"}


def archive_bucket_id(template: Template) -> str:
    """The archive bucket: the one whose server access logs go to the other (both are versioned)."""
    (bucket_id,) = [
        logical_id
        for logical_id, bucket in resources_of_type(template, "AWS::S3::Bucket").items()
        if "LoggingConfiguration" in bucket["Properties"]
    ]
    return bucket_id


def archive_role_id(template: Template) -> str:
    role_id: str = function_properties(template, ARCHIVE_HANDLER)["Role"]["Fn::GetAtt"][0]
    return role_id


def bucket_policy_statements(template: Template) -> list[dict[str, Any]]:
    bucket_id = archive_bucket_id(template)
    (policy,) = [
        p
        for p in resources_of_type(template, "AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": bucket_id}
    ]
    statements: list[dict[str, Any]] = resolve(
        policy["Properties"]["PolicyDocument"]["Statement"],
        {bucket_id: BUCKET_ARN, archive_role_id(template): ROLE_ARN},
    )
    return statements


def archive_role_statements(template: Template) -> list[dict[str, Any]]:
    bucket_id = archive_bucket_id(template)
    s3_statements = [
        s for s in role_statements(template, ARCHIVE_HANDLER) if any(a.startswith("s3:") for a in _as_list(s["Action"]))
    ]
    resolved: list[dict[str, Any]] = resolve(s3_statements, {bucket_id: BUCKET_ARN})
    return resolved


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def object_arn(key: str) -> str:
    return f"{BUCKET_ARN}/{key}"


def put(key: str, headers: dict[str, str], creating: bool = True, secure: bool = True) -> Request:
    context = dict(CREATE if creating else SECURE)
    if not secure:
        context["aws:SecureTransport"] = "false"
    if "If-None-Match" in headers:
        context["s3:if-none-match"] = headers["If-None-Match"]
    if "If-Match" in headers:
        context["s3:if-match"] = headers["If-Match"]
    return Request(ROLE_ARN, "s3:PutObject", object_arn(key), context)


# --- the template -------------------------------------------------------------------------------


def test_bucket_policy_denies_unconditional_puts_as_seed_003_shows(template: Template) -> None:
    statements = {s.get("Sid"): s for s in bucket_policy_statements(template)}
    assert statements["DenyDeltaObjectWritesWithoutIfNoneMatch"] == {
        "Sid": "DenyDeltaObjectWritesWithoutIfNoneMatch",
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": "s3:PutObject",
        "Resource": f"{BUCKET_ARN}/deltas/*",
        "Condition": {"Null": {"s3:if-none-match": "true"}, "Bool": {"s3:ObjectCreationOperation": "true"}},
    }
    assert statements["DenyMetastoreWritesWithoutIfMatchOrIfNoneMatch"] == {
        "Sid": "DenyMetastoreWritesWithoutIfMatchOrIfNoneMatch",
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": "s3:PutObject",
        "Resource": f"{BUCKET_ARN}/metastore/*",
        "Condition": {
            "Null": {"s3:if-match": "true", "s3:if-none-match": "true"},
            "Bool": {"s3:ObjectCreationOperation": "true"},
        },
    }
    tls = [s for s in bucket_policy_statements(template) if "aws:SecureTransport" in json.dumps(s.get("Condition", {}))]
    assert len(tls) == 1 and tls[0]["Effect"] == "Deny" and tls[0]["Action"] == "s3:*"


def test_bucket_is_private_encrypted_versioned_logged_and_retained(template: Template) -> None:
    bucket = resources_of_type(template, "AWS::S3::Bucket")[archive_bucket_id(template)]
    properties = bucket["Properties"]
    assert properties["PublicAccessBlockConfiguration"] == dict.fromkeys(
        ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets"), True
    )
    assert properties["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "AES256"
    }
    assert properties["VersioningConfiguration"] == {"Status": "Enabled"}
    assert properties["LoggingConfiguration"]["LogFilePrefix"] == "archive-bucket/"
    assert bucket["DeletionPolicy"] == "Retain" and bucket["UpdateReplacePolicy"] == "Retain"
    rules = {rule["Id"]: rule for rule in properties["LifecycleConfiguration"]["Rules"]}
    assert rules["ExpireSupersededRegistryVersions"]["Prefix"] == "metastore/"
    assert "ExpirationInDays" not in rules["ExpireSupersededRegistryVersions"]  # current objects are kept


def test_the_access_log_bucket_is_versioned_and_keeps_a_deleted_log_30_days(template: Template) -> None:
    """checkov's CKV_AWS_21: a server access log deleted early (or expired) stays recoverable for a while."""
    archive = resources_of_type(template, "AWS::S3::Bucket")[archive_bucket_id(template)]
    log_bucket_id = archive["Properties"]["LoggingConfiguration"]["DestinationBucketName"]["Ref"]
    log_bucket = resources_of_type(template, "AWS::S3::Bucket")[log_bucket_id]
    properties = log_bucket["Properties"]
    assert properties["VersioningConfiguration"] == {"Status": "Enabled"}
    assert "ObjectLockEnabled" not in properties
    rules = {rule["Id"]: rule for rule in properties["LifecycleConfiguration"]["Rules"]}
    assert rules["ExpireAccessLogs"]["ExpirationInDays"] == 365
    assert rules["ExpireAccessLogs"]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 30}
    assert rules["RemoveExpiredDeleteMarkers"]["ExpiredObjectDeleteMarker"] is True
    assert log_bucket["DeletionPolicy"] == "Retain"


def test_archive_function_is_built_like_the_others(template: Template) -> None:
    archive, reduce = function_properties(template, ARCHIVE_HANDLER), function_properties(template, REDUCE_HANDLER)
    for name in ("Runtime", "Architectures", "Code", "Layers"):
        assert archive[name] == reduce[name], name
    variables = archive["Environment"]["Variables"]
    assert variables["ARCHIVE_BUCKET"] == {"Ref": archive_bucket_id(template)}
    assert (variables["FAILURE_ARCHIVE_LAMBDA_PCT"], variables["FAILURE_ARCHIVE_LAMBDA_AFTER_WRITE_PCT"]) == ("0", "0")
    assert variables["POWERTOOLS_SERVICE_NAME"] == "archive"
    assert "ReservedConcurrentExecutions" not in archive


def test_the_removed_registry_shard_setting_is_refused_with_what_replaced_it() -> None:
    with pytest.raises(SettingsError, match="'archiveRegistryShards' is gone: the archive no longer counts"):
        synthesize({"archiveRegistryShards": 8})


def test_archive_mapping_is_a_second_insert_only_consumer_of_the_delta_stream(template: Template) -> None:
    mapping = event_source_mapping(template, ARCHIVE_HANDLER)
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": [table_logical_id(template, "StreamShard"), "StreamArn"]}
    assert mapping["BatchSize"] == 100
    assert mapping["MaximumBatchingWindowInSeconds"] == DEFAULT_ARCHIVE_BATCHING_WINDOW_SECONDS
    assert json.loads(mapping["FilterCriteria"]["Filters"][0]["Pattern"]) == {
        "dynamodb": {"NewImage": {"StreamShard": {"S": [{"exists": True}]}}}
    }
    assert (mapping["BisectBatchOnFunctionError"], mapping["MaximumRetryAttempts"]) == (False, -1)
    assert "FunctionResponseTypes" not in mapping
    assert mapping.get("ParallelizationFactor", 1) == 1


def test_the_batching_window_is_a_setting_and_zero_sets_none() -> None:
    _stack, template = synthesize({"archiveBatchingWindowSeconds": 0})
    assert "MaximumBatchingWindowInSeconds" not in event_source_mapping(template, ARCHIVE_HANDLER)
    _stack, template = synthesize({"archiveBatchingWindowSeconds": 120})
    assert event_source_mapping(template, ARCHIVE_HANDLER)["MaximumBatchingWindowInSeconds"] == 120


def test_archive_role_may_only_create_its_objects_and_read_nothing(template: Template) -> None:
    grants = {
        (action, resource)
        for statement in archive_role_statements(template)
        for action in _as_list(statement["Action"])
        for resource in _as_list(statement["Resource"])
    }
    assert grants == {
        ("s3:PutObject", f"{BUCKET_ARN}/deltas/*"),  # batch objects
        ("s3:PutObject", f"{BUCKET_ARN}/metastore/receipts/*"),  # their receipts: the registry
    }


def test_archive_bucket_name_is_a_stack_output(template: Template) -> None:
    outputs = template.to_json()["Outputs"]
    assert outputs["ArchiveBucketName"]["Value"] == {"Ref": archive_bucket_id(template)}


# --- the policy's logic, evaluated ----------------------------------------------------------------


@dataclass(frozen=True)
class RecordedRequests:
    """What the archive function really sends: PutObject with its condition headers, and reads."""

    puts: list[tuple[str, dict[str, str]]]
    reads: list[tuple[str, str]]


@pytest.fixture(scope="module")
def recorded_archive_requests(emulator: Any) -> RecordedRequests:
    """A first batch, then a replay (its puts get 412)."""
    monkeypatch = pytest.MonkeyPatch()
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": emulator.endpoint_url,
    }.items():
        monkeypatch.setenv(name, value)
    try:
        with archive_bucket_environment(monkeypatch) as recorder:
            event = delta_event(["policy-a", "policy-b"])
            archive_handler.lambda_handler(event, LambdaContextStub())
            archive_handler.lambda_handler(event, LambdaContextStub())
    finally:
        monkeypatch.undo()
    requests = []
    for sent in recorder.puts:
        headers = {}
        if sent.if_none_match is not None:
            headers["If-None-Match"] = sent.if_none_match
        if sent.if_match is not None:
            headers["If-Match"] = sent.if_match
        requests.append((sent.key, headers))
    return RecordedRequests(requests, recorder.reads)


def test_every_request_the_archive_sends_is_allowed(
    template: Template, recorded_archive_requests: RecordedRequests
) -> None:
    kinds = set()
    for key, headers in recorded_archive_requests.puts:
        assert decide(bucket_policy_statements(template), archive_role_statements(template), put(key, headers)) == ALLOW
        kinds.add((key.split("/", 2)[1] if key.startswith("metastore/") else "deltas", tuple(sorted(headers))))
    # Batch objects and receipts, each created with If-None-Match: what it sends, and all it sends.
    assert kinds == {("deltas", ("If-None-Match",)), ("receipts", ("If-None-Match",))}
    assert recorded_archive_requests.reads == []


BATCH_KEY = "deltas/ab/" + "ab" * 32 + ".batch.json"
RECEIPT = "metastore/receipts/ab/" + "ab" * 32 + ".json"


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (put(BATCH_KEY, {}), EXPLICIT_DENY),  # unconditional create
        (put(BATCH_KEY, {"If-Match": '"etag"'}), EXPLICIT_DENY),  # overwrite
        (put(RECEIPT, {}), EXPLICIT_DENY),  # blind receipt overwrite
        (put(RECEIPT, {"If-None-Match": "*"}, secure=False), EXPLICIT_DENY),  # no TLS
        (put(RECEIPT, {"If-None-Match": "*"}), ALLOW),
        (put("elsewhere/x.json", {"If-None-Match": "*"}), IMPLICIT_DENY),  # outside its prefixes
        (put("metastore/other.json", {"If-None-Match": "*"}), IMPLICIT_DENY),  # only the receipts
        (put("metastore/registry/5.json", {"If-None-Match": "*"}), IMPLICIT_DENY),  # the old registry: never again
        (put("metastore/registry.json", {}), EXPLICIT_DENY),  # blind registry overwrite
        # A multipart part cannot carry the header; s3:ObjectCreationOperation exempts it.
        (put(BATCH_KEY, {}, creating=False), ALLOW),
        (Request(ROLE_ARN, "s3:GetObject", f"{BUCKET_ARN}/{BATCH_KEY}", SECURE), IMPLICIT_DENY),
        (Request(ROLE_ARN, "s3:GetObject", f"{BUCKET_ARN}/metastore/registry.json", SECURE), IMPLICIT_DENY),
        (Request(ROLE_ARN, "s3:DeleteObject", f"{BUCKET_ARN}/{BATCH_KEY}", SECURE), IMPLICIT_DENY),
    ],
)
def test_policy_decisions(template: Template, request_: Request, expected: str) -> None:
    assert decide(bucket_policy_statements(template), archive_role_statements(template), request_) == expected


ADMIN_ARN = "arn:aws:iam::123456789012:role/admin"
ADMIN_ALLOW_ALL = [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]
DELTA_KEY = BATCH_KEY


def test_only_the_archive_role_may_write_or_delete_archived_objects_and_the_registry(template: Template) -> None:
    (statement,) = [
        s for s in bucket_policy_statements(template) if s.get("Sid") == "DenyArchiveWritesExceptTheArchiveRole"
    ]
    assert statement["Effect"] == "Deny" and statement["Principal"] == {"AWS": "*"}
    assert {"s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion", "s3:PutObjectRetention"} <= set(
        statement["Action"]
    )
    assert set(statement["Resource"]) == {
        f"{BUCKET_ARN}/deltas/*",
        f"{BUCKET_ARN}/metastore/receipts/*",
        f"{BUCKET_ARN}/metastore/registry/*",  # the earlier releases' registry, read by `audit`
        f"{BUCKET_ARN}/metastore/registry.json",
    }
    assert statement["Condition"] == {"ArnNotEquals": {"aws:PrincipalArn": [ROLE_ARN]}}


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        # An administrator's broad rights cannot add an object or a receipt, rewrite the registry or delete any ...
        (Request(ADMIN_ARN, "s3:PutObject", object_arn(DELTA_KEY), {**CREATE, "s3:if-none-match": "*"}), EXPLICIT_DENY),
        (Request(ADMIN_ARN, "s3:PutObject", object_arn(RECEIPT), {**CREATE, "s3:if-none-match": "*"}), EXPLICIT_DENY),
        (Request(ADMIN_ARN, "s3:DeleteObject", object_arn(RECEIPT), SECURE), EXPLICIT_DENY),
        (
            Request(ADMIN_ARN, "s3:PutObject", object_arn(registry_key(3)), {**CREATE, "s3:if-match": '"e"'}),
            EXPLICIT_DENY,
        ),
        (
            Request(
                ADMIN_ARN, "s3:PutObject", object_arn(registry_key(LEGACY_SHARD)), {**CREATE, "s3:if-match": '"e"'}
            ),
            EXPLICIT_DENY,
        ),
        (Request(ADMIN_ARN, "s3:DeleteObject", object_arn(DELTA_KEY), SECURE), EXPLICIT_DENY),
        (Request(ADMIN_ARN, "s3:DeleteObjectVersion", object_arn(registry_key(0)), SECURE), EXPLICIT_DENY),
        (Request(ADMIN_ARN, "s3:DeleteObject", object_arn(registry_key(LEGACY_SHARD)), SECURE), EXPLICIT_DENY),
        # ... while the rest of the bucket, and reading, stay theirs.
        (Request(ADMIN_ARN, "s3:PutObject", object_arn("notes/x.txt"), CREATE), ALLOW),
        (Request(ADMIN_ARN, "s3:GetObject", object_arn(DELTA_KEY), SECURE), ALLOW),
    ],
)
def test_an_administrator_cannot_forge_the_archive(template: Template, request_: Request, expected: str) -> None:
    assert decide(bucket_policy_statements(template), ADMIN_ALLOW_ALL, request_) == expected


def test_a_configured_break_glass_role_may_repair_the_archive() -> None:
    break_glass = "arn:aws:iam::123456789012:role/BreakGlass"
    _stack, template = synthesize({"breakGlassRoleArn": break_glass})
    statements = bucket_policy_statements(template)
    (deny,) = [s for s in statements if s.get("Sid") == "DenyArchiveWritesExceptTheArchiveRole"]
    assert deny["Condition"] == {"ArnNotEquals": {"aws:PrincipalArn": [ROLE_ARN, break_glass]}}
    repair = Request(break_glass, "s3:DeleteObject", object_arn(DELTA_KEY), SECURE)
    assert decide(statements, ADMIN_ALLOW_ALL, repair) == ALLOW
    assert (
        decide(statements, ADMIN_ALLOW_ALL, Request(ADMIN_ARN, repair.action, repair.resource, SECURE)) == EXPLICIT_DENY
    )


def test_the_deny_binds_any_principal_not_only_the_archive_role(template: Template) -> None:
    admin = Request("arn:aws:iam::123456789012:role/admin", "s3:PutObject", f"{BUCKET_ARN}/deltas/x", CREATE)
    admin_allow_all = [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]
    assert decide(bucket_policy_statements(template), admin_allow_all, admin) == EXPLICIT_DENY


# --- the emulator's CloudFormation --------------------------------------------------------------


def test_the_archive_storage_deploys_in_the_emulator(template: Template, aws_environment: str) -> None:
    """moto's CloudFormation creates the buckets and accepts the bucket policies (it does not
    enforce them, nor versioning, logging or lifecycle rules: the tests above cover those)."""
    resources = {
        logical_id: resource
        for logical_id, resource in template.to_json()["Resources"].items()
        if resource["Type"] in ("AWS::S3::Bucket", "AWS::S3::BucketPolicy")
    }
    assert len(resources) == 4
    bucket_id = archive_bucket_id(template)
    body = {"Resources": resources, "Outputs": {"ArchiveBucketName": {"Value": {"Ref": bucket_id}}}}
    cloudformation = boto3.client("cloudformation")
    stack_name = f"archive-{uuid.uuid4().hex[:8]}"
    cloudformation.create_stack(StackName=stack_name, TemplateBody=json.dumps(body))
    deadline = time.monotonic() + 20
    while (stack := cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0])["StackStatus"].endswith(
        "IN_PROGRESS"
    ) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert stack["StackStatus"] == "CREATE_COMPLETE", stack.get("StackStatusReason")
    (output,) = stack["Outputs"]
    s3 = boto3.client("s3")
    s3.put_object(Bucket=output["OutputValue"], Key="deltas/00/probe.json", Body=b"{}", IfNoneMatch="*")
    with pytest.raises(s3.exceptions.ClientError, match="PreconditionFailed"):
        s3.put_object(Bucket=output["OutputValue"], Key="deltas/00/probe.json", Body=b"{}", IfNoneMatch="*")
