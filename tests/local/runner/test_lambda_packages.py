"""A local execution environment imports what a function imports on Lambda, and nothing else.

Proven from inside a worker running the real function asset (bundled as `cdk synth` bundles it)
with the Powertools layer: the pure-Python protobuf the asset carries, Powertools from the layer,
boto3 from the runtime's directory, and no path of the development environment (whose compiled
protobuf once hid a record that stalls a shard on Lambda).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from local.deploy.deployer import LOCAL_POWERTOOLS_LAYER_NAME
from local.runner.discovery import layer_names
from local.runner.execution_environment import ExecutionEnvironment
from local.runner.lambda_packages import UnknownLayer, import_directories, required_distributions
from stacks.functions import FunctionAssetBundler

POWERTOOLS_LAYER = f"arn:aws:lambda:us-east-1:123456789012:layer:{LOCAL_POWERTOOLS_LAYER_NAME}:1"
PROBE = """
import sys


def handler(event, context):
    from google.protobuf.internal import api_implementation

    import aws_lambda_powertools
    import boto3
    import state_function.handler  # the real handler imports with only what Lambda has

    importable = {}
    for name in event["must_not_import"]:
        try:
            __import__(name)
            importable[name] = True
        except ImportError:
            importable[name] = False
    return {
        "sys_path": sys.path,
        "protobuf": api_implementation.Type(),
        "powertools": aws_lambda_powertools.__file__,
        "boto3": boto3.__file__,
        "importable": importable,
    }
"""
DEVELOPMENT_ONLY = ["moto", "hypothesis", "pytest", "local", "stacks", "aws_cdk", "google._upb._message", "rich"]


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("lambda")
    code_dir = root / "task"
    FunctionAssetBundler().try_bundle(str(code_dir))
    (code_dir / "lambda_probe.py").write_text(PROBE)
    import_dirs = import_directories([POWERTOOLS_LAYER], packages_dir=root / "packages")
    environment = ExecutionEnvironment(
        function_name="probe",
        code_dir=code_dir,
        handler="lambda_probe.handler",
        environment={"AWS_REGION": "us-east-1", "STATE_TABLE": "t", "QUARANTINE_TABLE": "q"},
        timeout_seconds=60,
        import_dirs=import_dirs,
    )
    try:
        result = environment.invoke({"must_not_import": DEVELOPMENT_ONLY})
    finally:
        environment.kill()
    assert result.error is None, result.error
    return {"code_dir": code_dir, "import_dirs": import_dirs, **result.payload}


def test_the_asset_runs_the_pure_python_protobuf(probe: dict[str, Any]) -> None:
    assert probe["protobuf"] == "python"


def test_nothing_of_the_development_environment_is_importable(probe: dict[str, Any]) -> None:
    assert probe["importable"] == dict.fromkeys(DEVELOPMENT_ONLY, False)
    ours = [str(probe["code_dir"]), *map(str, probe["import_dirs"])]
    assert probe["sys_path"][: len(ours)] == ours, "the package, the layer, the runtime's SDK, in Lambda's order"
    rest = probe["sys_path"][len(ours) :]
    assert rest, "the standard library follows"
    assert not [path for path in rest if "site-packages" in path or path.startswith(sys.prefix + "/")], (
        "only the base interpreter's standard library"
    )


def test_powertools_comes_from_the_layer_and_boto3_from_the_runtime(probe: dict[str, Any]) -> None:
    layer, runtime = probe["import_dirs"]
    assert Path(probe["powertools"]).is_relative_to(layer)
    assert Path(probe["boto3"]).is_relative_to(runtime)


def test_the_runtime_directory_holds_the_sdk_and_what_it_requires_without_extras() -> None:
    assert required_distributions("boto3") == [
        "boto3",
        "botocore",
        "jmespath",
        "python-dateutil",
        "s3transfer",
        "six",
        "urllib3",
    ]


def test_a_layer_the_local_runtime_cannot_provide_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(UnknownLayer, match="OtherLayer"):
        import_directories(["arn:aws:lambda:us-east-1:1:layer:OtherLayer:3"], packages_dir=tmp_path)


def test_a_layer_named_by_a_public_parameter_is_the_deployers_stand_in() -> None:
    """Earlier releases name Powertools by the whole ARN an SSM parameter holds (`{"Ref": ...}`)."""
    parameters = {"P": {"Type": "AWS::SSM::Parameter::Value<String>", "Default": "/aws/service/powertools/x/3.1"}}
    assert layer_names({"Layers": [{"Ref": "P"}]}, parameters, "us-east-1") == (LOCAL_POWERTOOLS_LAYER_NAME,)
    joined = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, f":1:layer:{LOCAL_POWERTOOLS_LAYER_NAME}:", "7"]]}
    assert layer_names({"Layers": [joined]}, {}, "us-east-1") == (LOCAL_POWERTOOLS_LAYER_NAME,)
    assert layer_names({}, parameters, "us-east-1") == ()
