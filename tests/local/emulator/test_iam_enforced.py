"""IAM enforced by the emulator for assumed-role sessions, over HTTP (`local.emulator.iam_check`).

A role is created with an inline policy, assumed through the emulator's STS, and called as:
what the policy allows works, anything else fails as AWS fails it (AccessDeniedException,
per-statement AccessDenied, S3's 403, a missing key's 403 without ListBucket), a changed
policy applies to the next call, and callers with dummy credentials are not checked.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from local.emulator.control import EmulatorProcess, iam_report, start_emulator
from local.runner.expiry import OnFailureDestination
from tests.local.conftest import AwsClientFactory

ACCOUNT = "123456789012"
ROLE = "FunctionRole"
SESSION = f"arn:aws:sts::{ACCOUNT}:assumed-role/{ROLE}/function"
BUCKET = "archive"
STREAM = "ingest"
TRUST = {
    "Statement": [{"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}]
}


def table_arn(name: str) -> str:
    return f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/{name}"


def grants(stream_arn: str, *extra: dict[str, Any]) -> str:
    statements = [
        {"Effect": "Allow", "Action": ["dynamodb:PutItem", "dynamodb:PartiQLInsert"], "Resource": table_arn("Granted")},
        {"Effect": "Allow", "Action": ["dynamodb:DescribeStream", "dynamodb:GetShardIterator", "dynamodb:GetRecords"],
         "Resource": stream_arn},
        {"Effect": "Allow", "Action": ["kinesis:ListShards", "kinesis:GetShardIterator", "kinesis:GetRecords"],
         "Resource": f"arn:aws:kinesis:us-east-1:{ACCOUNT}:stream/{STREAM}"},
        {"Effect": "Allow", "Action": ["s3:PutObject", "s3:GetObject"], "Resource": f"arn:aws:s3:::{BUCKET}/deltas/*"},
        *extra,
    ]  # fmt: skip
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


class Role:
    """Clients calling as the assumed role, and the role's policy (changed with `grant`)."""

    def __init__(self, aws_client: AwsClientFactory, endpoint_url: str) -> None:
        self.admin = aws_client
        dynamodb = aws_client("dynamodb")
        for name in ("Granted", "Other"):
            dynamodb.create_table(
                TableName=name,
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
                StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
            )
        self.stream_arn = dynamodb.describe_table(TableName="Granted")["Table"]["LatestStreamArn"]
        aws_client("s3").create_bucket(Bucket=BUCKET)
        aws_client("kinesis").create_stream(StreamName=STREAM, ShardCount=1)
        arn = aws_client("iam").create_role(RoleName=ROLE, AssumeRolePolicyDocument=json.dumps(TRUST))["Role"]["Arn"]
        self.grant()
        issued = aws_client("sts").assume_role(RoleArn=arn, RoleSessionName="function")["Credentials"]
        self.session = boto3.session.Session(
            aws_access_key_id=issued["AccessKeyId"],
            aws_secret_access_key=issued["SecretAccessKey"],
            aws_session_token=issued["SessionToken"],
            region_name="us-east-1",
        )
        self.endpoint_url = endpoint_url

    def grant(self, *extra: dict[str, Any]) -> None:
        """The role's policy: the base grants and `extra` statements (a put replaces the policy)."""
        self.admin("iam").put_role_policy(
            RoleName=ROLE, PolicyName="Grants", PolicyDocument=grants(self.stream_arn, *extra)
        )

    def client(self, service: str) -> Any:
        config = Config(retries={"total_max_attempts": 1, "mode": "standard"})
        return self.session.client(service, endpoint_url=self.endpoint_url, config=config)  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def role(aws_client: AwsClientFactory, emulator_endpoint: str) -> Iterator[Role]:
    the_role = Role(aws_client, emulator_endpoint)
    yield the_role
    the_role.grant()


def denied(call: Callable[[], Any]) -> dict[str, Any]:
    """The error of a call that must be refused."""
    with pytest.raises(ClientError) as refused:
        call()
    error: dict[str, Any] = dict(refused.value.response["Error"])
    return error


def not_authorized(action: str, resource: str) -> str:
    return (
        f"User: {SESSION} is not authorized to perform: {action} on resource: {resource} "
        f"because no identity-based policy allows the {action} action"
    )


def test_the_role_may_make_the_calls_its_policy_allows_and_no_other(role: Role, aws_client: AwsClientFactory) -> None:
    dynamodb = role.client("dynamodb")
    dynamodb.put_item(TableName="Granted", Item={"pk": {"S": "a"}})
    error = denied(lambda: dynamodb.put_item(TableName="Other", Item={"pk": {"S": "a"}}))
    assert error == {"Code": "AccessDeniedException", "Message": not_authorized("dynamodb:PutItem", table_arn("Other"))}
    error = denied(lambda: dynamodb.delete_item(TableName="Granted", Key={"pk": {"S": "a"}}))
    assert error["Message"] == not_authorized("dynamodb:DeleteItem", table_arn("Granted"))
    assert aws_client("dynamodb").get_item(TableName="Granted", Key={"pk": {"S": "a"}})["Item"], "nothing deleted"
    aws_client("dynamodb").put_item(TableName="Other", Item={"pk": {"S": "b"}})  # dummy credentials: not checked
    assert role.client("sts").get_caller_identity()["Arn"] == SESSION


def test_a_batch_of_statements_is_authorised_statement_by_statement_and_a_transaction_as_a_whole(
    role: Role, aws_client: AwsClientFactory
) -> None:
    dynamodb = role.client("dynamodb")
    insert = "INSERT INTO \"{}\" VALUE {{'pk': ?}}"
    responses = dynamodb.batch_execute_statement(
        Statements=[
            {"Statement": insert.format("Granted"), "Parameters": [{"S": "p1"}]},
            {"Statement": insert.format("Other"), "Parameters": [{"S": "p1"}]},
        ]
    )["Responses"]
    assert "Error" not in responses[0]
    assert responses[1]["Error"] == {
        "Code": "AccessDenied",
        "Message": not_authorized("dynamodb:PartiQLInsert", table_arn("Other")),
    }
    admin = aws_client("dynamodb")
    assert "Item" in admin.get_item(TableName="Granted", Key={"pk": {"S": "p1"}})
    assert "Item" not in admin.get_item(TableName="Other", Key={"pk": {"S": "p1"}})

    put = {"Put": {"TableName": "Granted", "Item": {"pk": {"S": "t1"}}}}
    update = {"Update": {"TableName": "Granted", "Key": {"pk": {"S": "t2"}}, "UpdateExpression": "SET v = :v",
                         "ExpressionAttributeValues": {":v": {"N": "1"}}}}  # fmt: skip
    error = denied(lambda: dynamodb.transact_write_items(TransactItems=[put, update]))
    assert error["Message"] == not_authorized("dynamodb:UpdateItem", table_arn("Granted"))
    assert "Item" not in admin.get_item(TableName="Granted", Key={"pk": {"S": "t1"}}), "nothing of it applied"


def test_the_role_reads_the_streams_it_is_granted_and_may_not_write_to_them(role: Role) -> None:
    streams = role.client("dynamodbstreams")
    shard = streams.describe_stream(StreamArn=role.stream_arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterator = streams.get_shard_iterator(StreamArn=role.stream_arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    assert streams.get_records(ShardIterator=iterator["ShardIterator"])["Records"]
    kinesis = role.client("kinesis")
    shard = kinesis.list_shards(StreamName=STREAM)["Shards"][0]["ShardId"]
    iterator = kinesis.get_shard_iterator(StreamName=STREAM, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    assert kinesis.get_records(ShardIterator=iterator["ShardIterator"])["Records"] == []
    error = denied(lambda: kinesis.put_record(StreamName=STREAM, Data=b"x", PartitionKey="k"))
    assert error["Code"] == "AccessDeniedException"
    other = role.stream_arn.replace("Granted", "Other")
    assert denied(lambda: streams.describe_stream(StreamArn=other))["Code"] == "AccessDeniedException"


def test_s3_refuses_other_keys_and_tells_a_missing_key_only_to_a_role_that_may_list(role: Role) -> None:
    s3 = role.client("s3")
    s3.put_object(Bucket=BUCKET, Key="deltas/a", Body=b"1")
    assert s3.get_object(Bucket=BUCKET, Key="deltas/a")["Body"].read() == b"1"
    error = denied(lambda: s3.put_object(Bucket=BUCKET, Key="metastore/registry.json", Body=b"{}"))
    assert error["Code"] == "AccessDenied"
    assert error["Message"] == not_authorized("s3:PutObject", f'"arn:aws:s3:::{BUCKET}/metastore/registry.json"')
    assert denied(lambda: s3.get_object(Bucket=BUCKET, Key="deltas/missing"))["Code"] == "AccessDenied"
    assert denied(lambda: s3.head_object(Bucket=BUCKET, Key="deltas/missing"))["Code"] == "403"
    assert denied(lambda: s3.list_objects_v2(Bucket=BUCKET, Prefix="deltas/"))["Code"] == "AccessDenied"

    listing = {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{BUCKET}",
               "Condition": {"StringLikeIfExists": {"s3:prefix": ["deltas/*"]}}}  # fmt: skip
    role.grant(listing)  # applies to the next call, as a changed policy does on AWS (eventually)
    try:
        assert denied(lambda: s3.get_object(Bucket=BUCKET, Key="deltas/missing"))["Code"] == "NoSuchKey"
        assert denied(lambda: s3.head_object(Bucket=BUCKET, Key="deltas/missing"))["Code"] == "404"
        assert [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="deltas/")["Contents"]] == ["deltas/a"]
        assert denied(lambda: s3.list_objects_v2(Bucket=BUCKET, Prefix="metastore/"))["Code"] == "AccessDenied"
    finally:
        role.grant()


def test_the_role_sends_to_the_queue_and_topic_it_is_granted_and_is_refused_any_other(
    role: Role, aws_client: AwsClientFactory
) -> None:
    """What the runner needs of the role for an on-failure destination (`local.runner.expiry`):
    ``sqs:SendMessage`` on the queue, ``sns:Publish`` on the topic, each refused as its service
    refuses (SQS ``AccessDeniedException``, SNS ``AuthorizationError``)."""
    sqs, sns = aws_client("sqs"), aws_client("sns")
    queues = {name: sqs.create_queue(QueueName=name)["QueueUrl"] for name in ("failed", "elsewhere")}
    topics = {name: sns.create_topic(Name=name)["TopicArn"] for name in ("failed", "elsewhere")}
    queue_arn = f"arn:aws:sqs:us-east-1:{ACCOUNT}:failed"
    role.grant(
        {"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": queue_arn},
        {"Effect": "Allow", "Action": "sns:Publish", "Resource": topics["failed"]},
    )
    try:
        role.client("sqs").send_message(QueueUrl=queues["failed"], MessageBody="{}")
        role.client("sns").publish(TopicArn=topics["failed"], Message="{}")
        error = denied(lambda: role.client("sqs").send_message(QueueUrl=queues["elsewhere"], MessageBody="{}"))
        assert error == {
            "Code": "AccessDeniedException",
            "Message": not_authorized("sqs:SendMessage", queue_arn.replace("failed", "elsewhere")),
        }
        error = denied(lambda: role.client("sns").publish(TopicArn=topics["elsewhere"], Message="{}"))
        assert (error["Code"], error["Message"]) == (
            "AuthorizationError",
            not_authorized("sns:Publish", topics["elsewhere"]),
        )
        assert [m["Body"] for m in sqs.receive_message(QueueUrl=queues["failed"])["Messages"]] == ["{}"]
        assert "Messages" not in sqs.receive_message(QueueUrl=queues["elsewhere"]), "nothing of the refused send"
    finally:
        role.grant()


def test_an_s3_on_failure_destination_needs_list_bucket_as_well_as_put_object(role: Role) -> None:
    """Lambda's S3 destination asks the execution role for ``s3:PutObject`` and ``s3:ListBucket``:
    the runner's delivery (`OnFailureDestination`) as a role granted only the first is refused and
    writes nothing; granted both, the invocation record is stored."""
    bucket_arn = f"arn:aws:s3:::{BUCKET}"
    destination = OnFailureDestination(bucket_arn, role.client)
    record = {"requestContext": {"condition": "RetryAttemptsExhausted"}, "version": "1.0"}

    def deliver() -> None:
        destination.send(record, event={"Records": []}, mapping_uuid="uuid-1", shard_id="shardId-1", at=0.0)

    role.grant({"Effect": "Allow", "Action": "s3:PutObject", "Resource": f"{bucket_arn}/aws/lambda/*"})
    try:
        assert denied(deliver)["Code"] == "403", "HeadBucket: refused without s3:ListBucket"
        s3 = role.admin("s3")
        assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix="aws/lambda/")
        role.grant(
            {"Effect": "Allow", "Action": "s3:PutObject", "Resource": f"{bucket_arn}/aws/lambda/*"},
            {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": bucket_arn},
        )
        deliver()
        assert len(s3.list_objects_v2(Bucket=BUCKET, Prefix="aws/lambda/")["Contents"]) == 1
    finally:
        role.grant()


def test_an_api_the_check_cannot_map_is_refused_by_name_and_the_report_counts_what_was_checked(
    role: Role, module_emulator: EmulatorProcess
) -> None:
    before = iam_report(module_emulator.endpoint_url)
    error = denied(lambda: role.client("sqs").list_queues())
    assert "the local IAM check cannot map the SQS operation ListQueues" in error["Message"]
    denied(lambda: role.client("dynamodb").put_item(TableName="Other", Item={"pk": {"S": "a"}}))
    role.client("dynamodb").put_item(TableName="Granted", Item={"pk": {"S": "a"}})
    report = iam_report(module_emulator.endpoint_url)
    assert report["mode"] == "enforce"
    counted = {name: report[name] - before[name] for name in ("requests_checked", "denied", "unevaluable")}
    assert counted == {"requests_checked": 3, "denied": 2, "unevaluable": 1}
    assert any("sqs:ListQueues" in message for message in report["denials"])
    with urllib.request.urlopen(module_emulator.endpoint_url + "/_compat/health", timeout=10) as response:
        assert json.loads(response.read())["iam"] == "enforce"
    log = module_emulator.log_path.read_text() if module_emulator.log_path else ""
    assert "IAM denied: " + not_authorized("dynamodb:PutItem", table_arn("Other")) in log, "each denial logged once"


@pytest.mark.emulator
def test_with_emulator_iam_off_nothing_is_checked(tmp_path: Path) -> None:
    emulator = start_emulator(tmp_path / "emulator.log", environment={**os.environ, "EMULATOR_IAM": "off"})
    try:
        session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing")

        def admin(service: str) -> Any:
            return session.client(service, endpoint_url=emulator.endpoint_url, region_name="us-east-1")  # type: ignore[call-overload]

        role = Role(admin, emulator.endpoint_url)
        role.client("dynamodb").put_item(TableName="Other", Item={"pk": {"S": "a"}})
        assert iam_report(emulator.endpoint_url) | {"denials": None} == {
            "mode": "off", "requests_checked": 0, "denied": 0, "unevaluable": 0, "denials": None
        }  # fmt: skip
    finally:
        emulator.stop()
