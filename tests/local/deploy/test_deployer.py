"""The deployer: a cloud assembly in, the stack deployed in the emulator, physical names out."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import zipfile
from pathlib import Path

import pytest

from local.deploy.deployer import (
    BOOTSTRAP_VERSION_PARAMETER,
    EMULATOR_ACCOUNT,
    LOCAL_POWERTOOLS_LAYER_NAME,
    DeploymentError,
    StackResource,
    aws_client,
    cloud_assembly_is_fresh,
    deploy,
    deploy_what_cloudformation_skipped,
    read_cloud_assembly,
    stand_in_public_parameters,
    zip_directory,
)
from local.emulator.control import EmulatorProcess
from local.paths import REPO_ROOT
from tests.local.runner.runner_harness import ASSET_HASH, stream_stack_template, write_cloud_assembly


def test_zip_directory_is_deterministic_and_skips_bytecode(tmp_path: Path) -> None:
    (tmp_path / "package").mkdir()
    (tmp_path / "package" / "module.py").write_text("X = 1\n")
    (tmp_path / "package" / "__pycache__").mkdir()
    (tmp_path / "package" / "__pycache__" / "module.cpython-311.pyc").write_bytes(b"\0")
    first = zip_directory(tmp_path)
    os.utime(tmp_path / "package" / "module.py", (1, 1))
    assert zip_directory(tmp_path) == first
    assert zipfile.ZipFile(io.BytesIO(first)).namelist() == ["package/module.py"]


def test_read_cloud_assembly_resolves_asset_destinations_for_the_emulator(tmp_path: Path) -> None:
    assembly_dir = write_cloud_assembly(tmp_path, "Demo", stream_stack_template(record_log=tmp_path / "log"))
    assembly = read_cloud_assembly(assembly_dir)
    assert assembly.stack_name == "Demo"
    assert assembly.required_bootstrap_version == 6
    (asset,) = assembly.assets
    assert asset.bucket_name == "cdk-hnb659fds-assets-123456789012-us-east-1"
    assert asset.object_key == f"{ASSET_HASH}.zip"
    assert asset.packaging == "zip" and asset.source_path.is_dir()
    with pytest.raises(DeploymentError, match="no stack 'Other'"):
        read_cloud_assembly(assembly_dir, "Other")
    with pytest.raises(DeploymentError, match="no readable cloud assembly"):
        read_cloud_assembly(tmp_path / "missing")


def test_freshness_compares_the_manifest_with_every_source(tmp_path: Path) -> None:
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "stack.py").write_text("")
    (tmp_path / "cdk.out").mkdir()
    assert not cloud_assembly_is_fresh(tmp_path / "cdk.out", tmp_path)
    (tmp_path / "cdk.out" / "manifest.json").write_text("{}")
    os.utime(tmp_path / "stacks" / "stack.py", (1, 1))
    assert cloud_assembly_is_fresh(tmp_path / "cdk.out", tmp_path)
    os.utime(tmp_path / "stacks" / "stack.py")
    os.utime(tmp_path / "cdk.out" / "manifest.json", (1, 1))
    assert not cloud_assembly_is_fresh(tmp_path / "cdk.out", tmp_path)


def test_the_fallback_tolerates_harmless_gaps_and_names_the_others() -> None:
    template = {
        "Resources": {
            "Table": {"Type": "AWS::DynamoDB::Table"},
            "Alarm": {"Type": "AWS::CloudWatch::Alarm"},
            "Global": {"Type": "AWS::DynamoDB::GlobalTable"},
        }
    }
    deployed = {"Table": StackResource("Table", "AWS::DynamoDB::Table", "t")}
    with pytest.raises(DeploymentError, match=r"Global \(AWS::DynamoDB::GlobalTable\)"):
        deploy_what_cloudformation_skipped(template, deployed)
    del template["Resources"]["Global"]
    assert deploy_what_cloudformation_skipped(template, deployed) == ["Alarm"]


def test_deploy_publishes_assets_bootstraps_and_reads_physical_names_back(
    module_emulator: EmulatorProcess, tmp_path: Path
) -> None:
    endpoint = module_emulator.endpoint_url
    template = stream_stack_template(record_log=tmp_path / "log", table_mapping={})
    assembly_dir = write_cloud_assembly(tmp_path / "cdk.out", "DeployerTest", template)

    deployment = deploy(assembly_dir, endpoint, require_outputs=["StreamName"])

    s3 = aws_client("s3", endpoint)
    package = s3.get_object(Bucket="cdk-hnb659fds-assets-123456789012-us-east-1", Key=f"{ASSET_HASH}.zip")
    body = package["Body"].read()
    assert "recorder.py" in zipfile.ZipFile(io.BytesIO(body)).namelist()
    assert int(aws_client("ssm", endpoint).get_parameter(Name=BOOTSTRAP_VERSION_PARAMETER)["Parameter"]["Value"]) >= 6

    kinesis = aws_client("kinesis", endpoint)
    assert kinesis.describe_stream_summary(StreamName=deployment.outputs["StreamName"])
    function_name = deployment.physical_id("Recorder")
    configuration = aws_client("lambda", endpoint).get_function_configuration(FunctionName=function_name)
    assert configuration["CodeSha256"] == base64.b64encode(hashlib.sha256(body).digest()).decode()
    assert deployment.resources["Table"].resource_type == "AWS::DynamoDB::Table"
    assert deployment.local_outputs() == {
        "endpoint_url": endpoint,
        "region": "us-east-1",
        "stream_name": deployment.outputs["StreamName"],
        "state_table": deployment.outputs["StateTableName"],
    }

    again = deploy(assembly_dir, endpoint)
    assert again.outputs == deployment.outputs, "redeploying an unchanged template changes nothing"

    with pytest.raises(DeploymentError, match="no output"):
        deploy(assembly_dir, endpoint, require_outputs=["AggregateTableName"])


def test_public_ssm_parameters_the_template_reads_get_a_clearly_local_stand_in(
    module_emulator: EmulatorProcess,
) -> None:
    ssm = aws_client("ssm", module_emulator.endpoint_url)
    powertools = "/aws/service/powertools/python/arm64/python3.14/3.37.0"
    shipped_by_moto = "/aws/service/global-infrastructure/regions/us-east-1"

    def ssm_typed(default: str) -> dict[str, str]:
        return {"Type": "AWS::SSM::Parameter::Value<String>", "Default": default}

    template = {
        "Parameters": {
            "Layer": ssm_typed(powertools),
            "Region": ssm_typed(shipped_by_moto),
            "BootstrapVersion": ssm_typed(BOOTSTRAP_VERSION_PARAMETER),
            "PlainString": {"Type": "String", "Default": "/aws/service/anything"},
        },
        "Resources": {},
    }

    overrides = stand_in_public_parameters(ssm, template, "us-east-1")

    stand_in = f"/local-emulator-stand-in{powertools}"
    assert overrides == [{"ParameterKey": "Layer", "ParameterValue": stand_in}]
    assert ssm.get_parameter(Name=stand_in)["Parameter"]["Value"] == (
        "arn:aws:lambda:us-east-1:123456789012:layer:AWSLambdaPowertoolsPythonV3-python314-arm64:1"
    )
    template["Parameters"]["Other"] = ssm_typed("/aws/service/other/thing")
    with pytest.raises(DeploymentError, match="Other reads the public SSM parameter /aws/service/other/thing"):
        stand_in_public_parameters(ssm, template, "us-east-1")


@pytest.mark.slow
def test_the_synthesized_stack_deploys_with_every_output_the_contract_names(
    module_emulator: EmulatorProcess,
) -> None:
    if not (REPO_ROOT / "app.py").exists():
        pytest.skip("the CDK app has not landed yet")
    from local.deploy.deployer import OUTPUT_KEYS_TO_LOCAL_NAMES, REQUIRED_OUTPUT_KEYS, synthesize  # noqa: PLC0415

    deployment = deploy(synthesize(), module_emulator.endpoint_url, require_outputs=REQUIRED_OUTPUT_KEYS)
    outputs = deployment.local_outputs()
    for key in ("stream_name", "state_table", "delta_table", "aggregate_table", "quarantine"):
        assert outputs[key], key
    assert set(deployment.outputs) <= set(OUTPUT_KEYS_TO_LOCAL_NAMES) | {
        "AlarmTopicArn",
        "DashboardUrl",
        "MetricsNamespace",
    }
    assert deployment.outputs["MetricsNamespace"] == f"ExactlyOnceAggregation/{deployment.stack_name}"
    # The dashboard deploys into the emulator too (moto's CloudFormation supports it): one template.
    dashboards = [r for r in deployment.resources.values() if r.resource_type == "AWS::CloudWatch::Dashboard"]
    assert len(dashboards) == 1 and deployment.outputs["DashboardUrl"].endswith(dashboards[0].physical_id)
    functions = [r for r in deployment.resources.values() if r.resource_type == "AWS::Lambda::Function"]
    assert len(functions) >= 3
    # The Powertools layer parameter resolved to the local stand-in (AWS's public one cannot exist here).
    parameters = aws_client("cloudformation", module_emulator.endpoint_url).describe_stacks(
        StackName=deployment.stack_name
    )["Stacks"][0]["Parameters"]
    stand_in_layer = f"arn:aws:lambda:us-east-1:{EMULATOR_ACCOUNT}:layer:{LOCAL_POWERTOOLS_LAYER_NAME}:1"
    assert stand_in_layer in [p["ParameterValue"] for p in parameters]
    json.dumps(deployment.to_json())


@pytest.mark.slow
def test_a_provisioned_stack_deploys_with_its_auto_scaling_left_to_aws(
    module_emulator: EmulatorProcess, tmp_path: Path
) -> None:
    """Provisioned tables are created as such; the Application Auto Scaling resources, which moto's
    CloudFormation does not know, are the harmless gaps the deployer lists (moto never throttles)."""
    from local.deploy.deployer import REQUIRED_OUTPUT_KEYS  # noqa: PLC0415
    from stacks import build_app  # noqa: PLC0415
    from tests.stacks.stack_helpers import load_cdk_json_context  # noqa: PLC0415

    endpoint = module_emulator.endpoint_url
    provisioned = {"mode": "provisioned", "minWriteCapacity": 7, "minReadCapacity": 2}
    tables = ("stateTableCapacity", "deltaTableCapacity", "aggregateTableCapacity")
    context = {**load_cdk_json_context(), "stackName": "ProvisionedLocal", **dict.fromkeys(tables, provisioned)}
    app, _stack = build_app(context, outdir=str(tmp_path / "cdk.out"))
    app.synth()

    deployment = deploy(tmp_path / "cdk.out", endpoint, require_outputs=REQUIRED_OUTPUT_KEYS)

    dynamodb = aws_client("dynamodb", endpoint)
    for output in ("StateTableName", "DeltaTableName", "AggregateTableName"):
        table = dynamodb.describe_table(TableName=deployment.outputs[output])["Table"]
        assert table["BillingModeSummary"]["BillingMode"] == "PROVISIONED", output
        throughput = table["ProvisionedThroughput"]
        assert (throughput["WriteCapacityUnits"], throughput["ReadCapacityUnits"]) == (7, 2), output
    quarantine = dynamodb.describe_table(TableName=deployment.outputs["QuarantineTableName"])["Table"]
    assert quarantine["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    scaling = {
        logical_id
        for logical_id, resource in deployment.template["Resources"].items()
        if resource["Type"].startswith("AWS::ApplicationAutoScaling::")
    }
    assert len(scaling) == 12, "a target and a policy per dimension (write, read) of each of the three tables"
    assert scaling <= set(deploy_what_cloudformation_skipped(deployment.template, deployment.resources))
    dynamodb.put_item(TableName=deployment.outputs["StateTableName"], Item={"TradeID": {"S": "t"}})
    assert dynamodb.get_item(TableName=deployment.outputs["StateTableName"], Key={"TradeID": {"S": "t"}})["Item"]
