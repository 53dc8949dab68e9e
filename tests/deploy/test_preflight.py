"""`python -m deploy preflight`: the account prerequisites of a first deploy, read with boto3.

The decisions (quota, stack states) are pure functions tested with numbers; the
reading is tested against the emulator over HTTP, one region per test so that no other test's
state is seen. moto lacks `lambda:GetAccountSettings`: preflight must say "unknown" there.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import uuid
import zipfile
from dataclasses import replace

import boto3
import pytest

from aggregation.names import TOKEN_AND_MARKERS, TOKEN_ONLY
from deploy.cli import main
from deploy.preflight import (
    REFERENCE_REGION,
    Account,
    DeploymentPlan,
    Status,
    check_bootstrap,
    check_partition,
    check_powertools_layer,
    concurrency_quota_check,
    run_preflight,
    stack_check,
)
from local.deploy.deployer import BOOTSTRAP_VERSION_PARAMETER
from stacks.functions import (
    POWERTOOLS_LAYER_ACCOUNT,
    POWERTOOLS_VERSION,
    powertools_layer_arn_for_version,
    powertools_layer_name,
)
from stacks.settings import PipelineSettings
from tests.environment import repository_root


def plan(
    reduce_factor: int = 1, layer_version: int | None = None, stack_name: str = "ExactlyOnceAggregation"
) -> DeploymentPlan:
    return DeploymentPlan(
        stack_name=stack_name,
        state_parallelization_factor=1,
        reduce_parallelization_factor=reduce_factor,
        powertools_parameter="/aws/service/powertools/python/arm64/python3.14/3.37.0",
        powertools_layer_version=layer_version,
    )


def account_in(region: str) -> Account:
    return Account(boto3.session.Session(region_name=region), region)


# ----------------------------------------------------------------- decisions (pure)


def test_a_small_concurrency_quota_is_a_warning_with_what_to_request() -> None:
    assert concurrency_quota_check(1000, plan()).status is Status.PASS
    small = concurrency_quota_check(10, plan())
    assert small.status is Status.WARN
    assert "start at about 7 (1 reducers)" in small.detail and "request 1000" in small.detail
    assert "L-B99A9384" in small.detail


def test_the_reducers_counted_are_one_per_delta_stream_shard_times_the_factor() -> None:
    """Nothing is reserved, so even a quota of 10 deploys: the reducers only count towards the start."""
    assert "start at about 11, 5 of them reducers" in concurrency_quota_check(1000, plan(reduce_factor=5)).detail
    assert concurrency_quota_check(10, plan(reduce_factor=10)).status is Status.WARN


def test_a_provisioned_stream_starts_one_state_execution_per_shard_and_lane() -> None:
    context = {"streamMode": {"mode": "provisioned", "shardCount": 20}, "stateParallelizationFactor": 2}
    provisioned = DeploymentPlan.from_settings(PipelineSettings.from_context(context.get))
    assert provisioned.kinesis_shards_at_start == 20
    assert "start at about 43, 1 of them reducers" in concurrency_quota_check(1000, provisioned).detail


@pytest.mark.parametrize(
    ("status", "result", "says"),
    [
        (None, Status.PASS, "creates it"),
        ("UPDATE_ROLLBACK_COMPLETE", Status.PASS, "updates it"),
        ("ROLLBACK_COMPLETE", Status.FAIL, "delete it first"),
        ("UPDATE_ROLLBACK_FAILED", Status.FAIL, "continue-update-rollback"),
        ("UPDATE_IN_PROGRESS", Status.FAIL, "wait until it finishes"),
    ],
)
def test_stack_states_cdk_deploy_cannot_update_fail(status: str | None, result: Status, says: str) -> None:
    check = stack_check("Pipeline", status)
    assert check.status is result and says in check.detail


@pytest.mark.parametrize(
    ("region", "status"),
    [
        ("eu-central-1", Status.PASS),
        ("cn-north-1", Status.FAIL),
        ("us-gov-west-1", Status.FAIL),
        ("xx-nowhere-9", Status.UNKNOWN),
    ],
)
def test_partitions_without_the_public_layer_fail(region: str, status: Status) -> None:
    check, _partition = check_partition(account_in(region))
    assert check.status is status


# ----------------------------------------------------------------- against the emulator


def test_a_fresh_region_needs_bootstrap_and_a_layer_and_the_emulators_gaps_are_unknown(aws_environment: str) -> None:
    checks = {check.name: check for check in run_preflight(account_in("eu-west-3"), plan())}
    assert {name: check.status for name, check in checks.items()} == {
        "credentials": Status.PASS,
        "partition": Status.PASS,
        "CDK bootstrap": Status.FAIL,
        "Powertools layer": Status.FAIL,
        "concurrency quota": Status.UNKNOWN,  # moto has no GetAccountSettings
        "stack ExactlyOnceAggregation": Status.PASS,
    }
    assert "npx cdk bootstrap aws://123456789012/eu-west-3" in checks["CDK bootstrap"].detail
    assert "eu-west-3 publishes no /aws/service/powertools/python/arm64/python3.14/3.37.0" in (
        checks["Powertools layer"].detail
    )
    assert "could not read Lambda's account settings" in checks["concurrency quota"].detail


def test_a_bootstrapped_region_with_the_layer_parameter_passes(aws_environment: str) -> None:
    region = "ap-northeast-3"
    account = account_in(region)
    assert check_bootstrap(account, "123456789012").status is Status.FAIL
    # What `cdk bootstrap` creates: the CDKToolkit stack, which owns the version parameter.
    version = {
        "Type": "AWS::SSM::Parameter",
        "Properties": {"Name": BOOTSTRAP_VERSION_PARAMETER, "Type": "String", "Value": "21"},
    }
    account.client("cloudformation").create_stack(
        StackName="CDKToolkit", TemplateBody=json.dumps({"Resources": {"CdkBootstrapVersion": version}})
    )
    bootstrap = check_bootstrap(account, "123456789012")
    assert bootstrap.status is Status.PASS and "bootstrap version 21" in bootstrap.detail

    # The public parameter cannot exist here (reserved name); the same read on a name that can.
    ssm = account.client("ssm")
    published = f"/preflight-test/{uuid.uuid4().hex}"
    arn = "arn:aws:lambda:ap-northeast-3:017000801446:layer:AWSLambdaPowertoolsPythonV3-python314-arm64:7"
    ssm.put_parameter(Name=published, Value=arn, Type="String")
    layer_plan = DeploymentPlan("S", 1, 1, published, None)
    layer = check_powertools_layer(account, "aws", layer_plan)
    assert layer.status is Status.PASS and layer.detail == f"{published} = {arn}"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (
            "arn:aws:lambda:ap-northeast-3:123456789012:layer:AWSLambdaPowertoolsPythonV3-python314-arm64:7",
            "belongs to account 123456789012, not to the Powertools publisher 017000801446",
        ),
        (
            "arn:aws:lambda:us-east-1:017000801446:layer:AWSLambdaPowertoolsPythonV3-python314-arm64:7",
            "is in us-east-1, not in the target region ap-northeast-3",
        ),
        ("not-an-arn", "'not-an-arn' is not a Lambda layer version ARN"),
    ],
)
def test_a_parameter_naming_someone_elses_layer_fails(aws_environment: str, value: str, says: str) -> None:
    """A parameter pointed at another account's or region's layer is refused before any deploy."""
    account = account_in("ap-northeast-3")
    name = f"/preflight-test/{uuid.uuid4().hex}"
    account.client("ssm").put_parameter(Name=name, Value=value, Type="String")
    check = check_powertools_layer(account, "aws", DeploymentPlan("S", 1, 1, name, None))
    assert check.status is Status.FAIL
    assert says in check.detail


def test_an_explicit_layer_version_is_looked_up_instead(aws_environment: str) -> None:
    check = check_powertools_layer(account_in("eu-west-3"), "aws", plan(layer_version=41))
    assert check.status is Status.FAIL
    assert check.detail.startswith(
        "arn:aws:lambda:eu-west-3:017000801446:layer:AWSLambdaPowertoolsPythonV3-python314-arm64:41 does not exist"
    )


def layer_build(marker: bytes) -> bytes:
    """A layer's zip, byte for byte the same for the same `marker` (one build published in two regions)."""
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr(zipfile.ZipInfo("python/build.txt", date_time=(2026, 1, 1, 0, 0, 0)), marker)
    return archive.getvalue()


def as_the_publisher(region: str) -> Account:
    """Preflight's view as the Powertools publisher account: the emulator keeps layers per account
    and finds one by ARN only in the caller's, so here the caller is the account the ARNs name."""
    role = f"arn:aws:iam::{POWERTOOLS_LAYER_ACCOUNT}:role/preflight-test"
    credentials = boto3.client("sts").assume_role(RoleArn=role, RoleSessionName="preflight")["Credentials"]
    session = boto3.session.Session(
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"],
        region_name=region,
    )
    return Account(session, region)


def publish_powertools_layer(region: str, build: bytes) -> int:
    """A version of the publisher's layer in `region`; returns its version number."""
    client = as_the_publisher(region).client("lambda")
    return int(client.publish_layer_version(LayerName=powertools_layer_name(), Content={"ZipFile": build})["Version"])


def test_without_the_parameter_preflight_names_the_version_of_the_same_build_here(aws_environment: str) -> None:
    """A release whose parameter was never written here (Powertools PR 7695) but whose layer was:
    the FAIL line names the version to pin, found by the content of the reference region's build."""
    parameter = f"/preflight-test/{uuid.uuid4().hex}"
    build = layer_build(POWERTOOLS_VERSION.encode())
    version = publish_powertools_layer(REFERENCE_REGION, build)
    reference_arn = powertools_layer_arn_for_version(version, "aws", REFERENCE_REGION)
    as_the_publisher(REFERENCE_REGION).client("ssm").put_parameter(Name=parameter, Value=reference_arn, Type="String")
    same, other = "ap-southeast-4", "me-central-1"
    for region, last in ((same, build), (other, layer_build(b"another release"))):
        published = as_the_publisher(region).client("lambda").list_layer_versions(LayerName=powertools_layer_name())
        for _older in range(version - 1 - len(published["LayerVersions"])):
            publish_powertools_layer(region, layer_build(b"an older release"))
        assert publish_powertools_layer(region, last) == version

    check = check_powertools_layer(as_the_publisher(same), "aws", DeploymentPlan("S", 1, 1, parameter, None))
    assert check.status is Status.FAIL
    assert check.detail == (
        f"{same} publishes no {parameter} (Powertools {POWERTOOLS_VERSION}): set -c powertoolsLayerVersion={version} "
        f"(the same build as {REFERENCE_REGION}'s parameter names), or deploy to another region"
    )
    # The same number holding another build is no release to pin: what to do, without a number.
    check = check_powertools_layer(as_the_publisher(other), "aws", DeploymentPlan("S", 1, 1, parameter, None))
    assert check.status is Status.FAIL
    assert check.detail == (
        f"{other} publishes no {parameter} (Powertools {POWERTOOLS_VERSION}): deploy to another region, "
        "or set -c powertoolsLayerVersion=N to a layer version that exists here"
    )


def test_a_deployed_stack_is_updatable(aws_environment: str) -> None:
    region = "ca-central-1"
    account = account_in(region)
    role = {
        "Type": "AWS::IAM::Role",
        "Properties": {"AssumeRolePolicyDocument": {"Version": "2012-10-17", "Statement": []}},
    }

    function = {
        "Type": "AWS::Lambda::Function",
        "Properties": {
            "Runtime": "python3.12",
            "Handler": "index.handler",
            "Role": {"Fn::GetAtt": ["Role", "Arn"]},
            "Code": {"ZipFile": "def handler(event, context):\n    return None\n"},
        },
    }
    template = {"Resources": {"Role": role, "Reduce": function}}
    account.client("cloudformation").create_stack(StackName="Deployed", TemplateBody=json.dumps(template))

    checks = {check.name: check for check in run_preflight(account, plan(stack_name="Deployed"))}
    assert checks["stack Deployed"].status is Status.PASS
    assert "updates it" in checks["stack Deployed"].detail

    # Deployed without the settings guard (a release before slices): mode crt cannot be upgraded
    # exactly with batches in flight, and `cdk deploy` cannot see it (README, Upgrading in place).
    for mode, status in ((TOKEN_AND_MARKERS, Status.PASS), (TOKEN_ONLY, Status.FAIL)):
        state = PipelineSettings.from_context({"reduceIdempotency": mode}.get).state_settings
        upgrade = replace(plan(stack_name="Deployed"), state_settings=state)
        checks = {check.name: check for check in run_preflight(account, upgrade)}
        assert checks["stack Deployed"].status is status
    assert checks["stack Deployed"].detail.startswith("the deployed stack has no settings guard")


def test_no_credentials_fail_in_one_line_and_stop_there(aws_environment: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    (check,) = run_preflight(account_in("eu-west-3"), plan())
    assert (check.name, check.status) == ("credentials", Status.FAIL)
    assert "configure a profile" in check.detail


# ----------------------------------------------------------------- the command line


def test_the_settings_are_the_ones_cdk_deploy_would_use() -> None:
    context = json.loads((repository_root() / "cdk.json").read_text())["context"]
    deployed = DeploymentPlan.from_settings(PipelineSettings.from_context(context.get))
    assert (deployed.stack_name, deployed.reduce_parallelization_factor, deployed.powertools_layer_version) == (
        "ExactlyOnceAggregation",
        1,
        None,
    )
    assert deployed.powertools_parameter == "/aws/service/powertools/python/arm64/python3.14/3.37.0"


def test_cli_exits_1_when_a_check_fails(aws_environment: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["preflight", "--region", "eu-west-3", "--stack-name", "Other", "-c", "reduceParallelizationFactor=4"])
        == 1
    )
    output = capsys.readouterr()
    assert "not bootstrapped" in output.out and "NOT READY" in output.out
    assert "stack Other" in output.out
    assert output.err == ""


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ([], "error: the following arguments are required: command"),
        (["preflight", "--bogus"], "error: unrecognized arguments: --bogus"),
        (["preflight", "-c", "aggregateSlices"], "error: argument -c/--context: 'aggregateSlices'"),
        (
            ["preflight", "-c", "reduceParallelizationFactor=11"],
            "error: cdk.json context 'reduceParallelizationFactor' must be 'auto' or an integer from 1 to 10, got '11'",
        ),
        (
            ["preflight", "-c", "reduceReservedConcurrency=0"],
            "error: cdk.json context 'reduceReservedConcurrency' is gone: reduce no longer reserves concurrency",
        ),
        (["preflight", "-c", "powertoolsLayerVersion=latest"], "error: cdk.json context 'powertoolsLayerVersion'"),
    ],
)
def test_misuse_is_one_line_and_exit_2(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-3")
    assert exit_code(arguments) == 2
    error = capsys.readouterr().err
    assert error.startswith(message) and error.count("\n") == 1 and "Traceback" not in error


def test_no_region_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    assert exit_code(["preflight"]) == 2
    assert (
        capsys.readouterr().err == "error: no AWS region: pass --region or set AWS_REGION (or the profile's region)\n"
    )


def exit_code(arguments: list[str]) -> int:
    """What the process would exit with: argparse exits itself on misuse, main returns otherwise."""
    try:
        return main(arguments)
    except SystemExit as stop:
        return int(stop.code or 0)


def test_python_m_deploy_runs_against_the_emulator_without_a_traceback(aws_environment: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "deploy", "preflight", "--region", "eu-west-3"],
        cwd=repository_root(),
        env={**os.environ, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert "│ CDK bootstrap" in result.stdout and "not bootstrapped" in result.stdout
    assert "unknown" in result.stdout
    assert result.stderr == "", "no traceback, and no Node-version banner either"


def test_the_command_without_credentials_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make preflight` without credentials answered with a table of one failed check (issue 38)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    assert exit_code(["preflight", "--region", "eu-west-3"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: no AWS credentials: configure a profile") and captured.err.count("\n") == 1
