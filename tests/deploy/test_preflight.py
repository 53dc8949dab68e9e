"""`python -m deploy preflight`: the account prerequisites of a first deploy, read with boto3.

The decisions (quota, reservation, stack states) are pure functions tested with numbers; the
reading is tested against the emulator over HTTP, one region per test so that no other test's
state is seen. moto lacks `lambda:GetAccountSettings`: preflight must say "unknown" there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import boto3
import pytest

from deploy.cli import main
from deploy.preflight import (
    Account,
    DeploymentPlan,
    Status,
    check_bootstrap,
    check_partition,
    check_powertools_layer,
    concurrency_quota_check,
    reservation_check,
    run_preflight,
    stack_check,
    stack_reservations,
)
from local.deploy.deployer import BOOTSTRAP_VERSION_PARAMETER
from stacks.settings import PipelineSettings
from tests.environment import repository_root


def plan(
    reserved: int = 1, layer_version: int | None = None, stack_name: str = "ExactlyOnceAggregation"
) -> DeploymentPlan:
    return DeploymentPlan(
        stack_name=stack_name,
        reduce_reserved_concurrency=reserved,
        state_parallelization_factor=1,
        powertools_parameter="/aws/service/powertools/python/arm64/python3.14/3.37.0",
        powertools_layer_version=layer_version,
    )


def account_in(region: str) -> Account:
    return Account(boto3.session.Session(region_name=region), region)


# ----------------------------------------------------------------- decisions (pure)


@pytest.mark.parametrize(
    ("account", "reserved", "status", "says"),
    [
        # (quota, unreserved now, reserved by this stack now)
        # An established account: reserve one, plenty left.
        ((1000, 1000, 0), 1, Status.PASS, "leaves 999 unreserved"),
        # A new account (quota 10): Lambda keeps 100 unreserved, so no reservation is possible.
        ((10, 10, 0), 1, Status.FAIL, "request a quota of at least 101"),
        ((10, 10, 0), 0, Status.PASS, "no reservation, as this account requires"),
        # Exactly enough: 101 unreserved leaves 100 after the reservation.
        ((101, 101, 0), 1, Status.PASS, "leaves 100 unreserved"),
        ((100, 100, 0), 1, Status.FAIL, "request a quota of at least 101"),
        # Others reserve 50 of 150: one more would leave 99.
        ((150, 100, 0), 1, Status.FAIL, "request a quota of at least 151"),
        # Redeploying: the stack's own reservation is given back first, so it still fits.
        ((101, 100, 1), 1, Status.PASS, "leaves 100 unreserved"),
        # Allowed but not chosen: say so.
        ((1000, 1000, 0), 0, Status.WARN, "-c reduceReservedConcurrency=1"),
    ],
)
def test_the_reservation_decision_follows_lambdas_minimum_unreserved_concurrency(
    account: tuple[int, int, int], reserved: int, status: Status, says: str
) -> None:
    check = reservation_check(*account, plan(reserved))
    assert (check.name, check.status) == ("reduce reservation", status)
    assert says in check.detail
    assert "\n" not in check.detail


def test_a_small_concurrency_quota_is_a_warning_with_what_to_request() -> None:
    assert concurrency_quota_check(1000, plan()).status is Status.PASS
    small = concurrency_quota_check(10, plan())
    assert small.status is Status.WARN
    assert "start at about 7" in small.detail and "request 1000" in small.detail and "L-B99A9384" in small.detail


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
        "reduce reservation": Status.UNKNOWN,
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


def test_an_explicit_layer_version_is_looked_up_instead(aws_environment: str) -> None:
    check = check_powertools_layer(account_in("eu-west-3"), "aws", plan(layer_version=41))
    assert check.status is Status.FAIL
    assert check.detail.startswith(
        "arn:aws:lambda:eu-west-3:017000801446:layer:AWSLambdaPowertoolsPythonV3-python314-arm64:41 does not exist"
    )


def test_a_deployed_stack_is_updatable_and_its_reservations_are_counted(aws_environment: str) -> None:
    region = "ca-central-1"
    account = account_in(region)
    role = {
        "Type": "AWS::IAM::Role",
        "Properties": {"AssumeRolePolicyDocument": {"Version": "2012-10-17", "Statement": []}},
    }

    def function(reserved: int | None) -> dict[str, object]:
        properties: dict[str, object] = {
            "Runtime": "python3.12",
            "Handler": "index.handler",
            "Role": {"Fn::GetAtt": ["Role", "Arn"]},
            "Code": {"ZipFile": "def handler(event, context):\n    return None\n"},
        }
        if reserved is not None:
            properties["ReservedConcurrentExecutions"] = reserved
        return {"Type": "AWS::Lambda::Function", "Properties": properties}

    template = {"Resources": {"Role": role, "Reduce": function(1), "Map": function(None)}}
    account.client("cloudformation").create_stack(StackName="Deployed", TemplateBody=json.dumps(template))

    assert stack_reservations(account, "Deployed") == 1
    assert stack_reservations(account, "NotDeployed") == 0
    checks = {check.name: check for check in run_preflight(account, plan(stack_name="Deployed"))}
    assert checks["stack Deployed"].status is Status.PASS
    assert "updates it" in checks["stack Deployed"].detail


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
    assert (deployed.stack_name, deployed.reduce_reserved_concurrency, deployed.powertools_layer_version) == (
        "ExactlyOnceAggregation",
        1,
        None,
    )
    assert deployed.powertools_parameter == "/aws/service/powertools/python/arm64/python3.14/3.37.0"


def test_cli_exits_1_when_a_check_fails(aws_environment: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["preflight", "--region", "eu-west-3", "--stack-name", "Other", "-c", "reduceReservedConcurrency=0"]) == 1
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
        (["preflight", "-c", "reduceReservedConcurrency"], "error: argument -c/--context: 'reduceReservedConcurrency'"),
        (
            ["preflight", "-c", "reduceReservedConcurrency=3"],
            "error: cdk.json context 'reduceReservedConcurrency' must be an integer from 0 to 1, got '3'",
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
