"""What the three pipeline functions share: code asset, runtime, Powertools layer, role, logs.

Nothing here needs Docker: the asset is the `lambdas/` directory plus the pure-Python modules
of `FUNCTION_DEPENDENCIES` (protobuf, for KPL aggregates), copied by a local bundler
(`FunctionAssetBundler`) from the distribution installed in the build's environment, and
Powertools comes from the AWS-managed public layer of the Powertools publisher account, whose
version CloudFormation reads at deploy time from the public SSM parameter AWS publishes for each
Powertools release, runtime and architecture.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any, Final

import jsii
from aws_cdk import AssetHashType, Aws, BundlingOptions, DockerImage, Duration, Fn, ILocalBundling, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_ssm as ssm
from aws_cdk.region_info import RegionInfo
from constructs import Construct

from aggregation.names import stack_metrics_namespace
from stacks.settings import PipelineSettings, SettingsError

LAMBDA_SOURCE_DIR: Final[Path] = Path(__file__).resolve().parent.parent / "lambdas"

RUNTIME: Final[lambda_.Runtime] = lambda_.Runtime.PYTHON_3_14
"""The newest Python runtime CDK knows (cdk-nag AwsSolutions-L1 accepts nothing older).

The code is kept compatible with Python 3.11, which the local runtime and the tests use."""

ARCHITECTURE: Final[lambda_.Architecture] = lambda_.Architecture.ARM_64

POWERTOOLS_VERSION: Final[str] = "3.37.0"
"""The Powertools release the functions run with: the `aws-lambda-powertools` pin of
requirements.txt and constraints.txt (a test keeps the three equal), so the deployed layer is
the build the tests ran against."""

POWERTOOLS_LAYER_ACCOUNT: Final[str] = "017000801446"
"""The AWS account that publishes the public Powertools for AWS Lambda (Python) layers in the
commercial regions: every layer ARN the functions get names it (never the deploying account)."""

SUPPORTED_PARTITIONS: Final[tuple[str, ...]] = ("aws",)
"""Where the Powertools layer and its public SSM parameter are published (the commercial regions);
China and GovCloud have other publisher accounts and no such parameter."""

TARGET_PARTITIONS_CONTEXT: Final[str] = "@aws-cdk/core:target-partitions"

SOURCE_EXCLUDES: Final[tuple[str, ...]] = (
    "__pycache__",
    "*.pyc",
    "tests",
    "test_*.py",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
)
"""What of `lambdas/` stays out of the asset (at any depth)."""


FUNCTION_DEPENDENCIES: Final[tuple[str, ...]] = ("protobuf",)
"""Distributions the functions import beyond the runtime's boto3 and the Powertools layer, each
pinned in requirements.txt and constraints.txt. Only their Python source goes into the asset:
protobuf's compiled accelerator (`google._upb`, built for the build machine) is left out, and
the pure-Python implementation it falls back to is the very code of protobuf's
``py3-none-any`` wheel, so the asset runs on arm64 (and x86_64) with no Docker build."""

COMPILED_SUFFIXES: Final[frozenset[str]] = frozenset({".so", ".pyd", ".pyc"})


def dependency_files(distribution: str) -> list[tuple[Path, Path]]:
    """(installed file, path inside the asset) of every pure-Python file of `distribution`."""
    files = metadata.files(distribution) or []
    return [
        (Path(str(file.locate())), Path(str(file)))
        for file in files
        if file.suffix not in COMPILED_SUFFIXES and ".." not in file.parts and "__pycache__" not in file.parts
    ]


@jsii.implements(ILocalBundling)
class FunctionAssetBundler:
    """Builds the code asset in place of a Docker bundling image: `lambdas/` and the dependencies' sources."""

    def try_bundle(self, output_dir: str, *_options: Any, **_keywords: Any) -> bool:
        """Copy the asset into `output_dir`; the bundling options (jsii hands them over as one
        struct) say nothing this bundler uses."""
        output = Path(output_dir)
        shutil.copytree(
            LAMBDA_SOURCE_DIR,
            output,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns(*SOURCE_EXCLUDES),
        )
        for distribution in FUNCTION_DEPENDENCIES:
            for installed, inside in dependency_files(distribution):
                (output / inside).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(installed, output / inside)
        return True


def function_code() -> lambda_.Code:
    """The functions' code asset, bundled locally (`FunctionAssetBundler`); its hash is of its contents."""
    return lambda_.Code.from_asset(
        str(LAMBDA_SOURCE_DIR),
        asset_hash_type=AssetHashType.OUTPUT,
        bundling=BundlingOptions(
            # Never pulled: the local bundler always succeeds, and CDK asks for an image only as a fallback.
            image=DockerImage.from_registry("public.ecr.aws/sam/build-python3.14"),
            local=FunctionAssetBundler(),
        ),
    )


def powertools_layer_parameter_name() -> str:
    """AWS's public SSM parameter holding the layer ARN of our Powertools release, runtime and architecture.

    Published by the Powertools maintainers in every commercial region as
    ``/aws/service/powertools/python/<arm64|x86_64>/<python3.XX>/<release>``; its value is the
    regional ARN of the matching ``AWSLambdaPowertoolsPythonV3-<runtime>-<architecture>`` version.
    """
    return f"/aws/service/powertools/python/{ARCHITECTURE.name}/{RUNTIME.name}/{POWERTOOLS_VERSION}"


def powertools_layer_name() -> str:
    """The publisher's layer name for our runtime and architecture (`AWSLambdaPowertoolsPythonV3-python314-arm64`)."""
    runtime_tag = RUNTIME.name.replace(".", "")  # python3.14 -> python314
    return f"AWSLambdaPowertoolsPythonV3-{runtime_tag}-{ARCHITECTURE.name}"


def powertools_layer_arn_for_version(
    version: int | str, partition: str = Aws.PARTITION, region: str = Aws.REGION
) -> str:
    """The ARN of one version of the publisher's layer (by default in the deployment's partition and region).

    `version` may be a deploy-time token (the version field of the public parameter's value)."""
    return f"arn:{partition}:lambda:{region}:{POWERTOOLS_LAYER_ACCOUNT}:layer:{powertools_layer_name()}:{version}"


LAYER_ARN_ACCOUNT_FIELD: Final[int] = 4
LAYER_ARN_REGION_FIELD: Final[int] = 3
LAYER_ARN_VERSION_FIELD: Final[int] = 7
"""Where a layer version ARN (``arn:<partition>:lambda:<region>:<account>:layer:<name>:<version>``)
holds its account, region and version, counted from 0 in its ``:``-separated fields."""


def powertools_layer_arn(scope: Construct, settings: PipelineSettings) -> str:
    """The layer ARN: the publisher's layer, its version read at deploy time unless a version is forced.

    By default the template gets a CloudFormation parameter of type
    ``AWS::SSM::Parameter::Value<String>`` defaulting to :func:`powertools_layer_parameter_name`,
    and takes only the version field of its value (``Fn::Select`` of ``Fn::Split`` on ``:``): the
    account is always `POWERTOOLS_LAYER_ACCOUNT`, the partition and region the deployment's and the
    name :func:`powertools_layer_name`, so whatever parameter a deployer passes, the functions can
    only run a layer version the publisher released in that region. (A CloudFormation rule could
    not assert this: rules cannot split a value to read its account.) `powertoolsLayerVersion`
    (an integer) names the version instead.
    """
    if settings.powertools_layer_version is None:
        published_arn = ssm.StringParameter.value_for_string_parameter(scope, powertools_layer_parameter_name())
        version = Fn.select(LAYER_ARN_VERSION_FIELD, Fn.split(":", published_arn))
        return powertools_layer_arn_for_version(version)
    return powertools_layer_arn_for_version(settings.powertools_layer_version)


def powertools_layer_arn_problem(arn: str, region: str) -> str | None:
    """Why `arn` is not a Powertools layer version of the publisher account in `region`, or None.

    What `make preflight` checks of the value the public parameter holds in the target region, so
    that a wrong parameter is reported before a deploy; the template itself takes only the version
    field of that value and builds the rest of the ARN (:func:`powertools_layer_arn`).
    """
    fields = arn.split(":")
    if len(fields) != 8 or fields[:3] != ["arn", "aws", "lambda"] or fields[5] != "layer":
        return f"{arn!r} is not a Lambda layer version ARN"
    if fields[LAYER_ARN_ACCOUNT_FIELD] != POWERTOOLS_LAYER_ACCOUNT:
        return (
            f"{arn} belongs to account {fields[LAYER_ARN_ACCOUNT_FIELD]}, not to the Powertools publisher "
            f"{POWERTOOLS_LAYER_ACCOUNT}"
        )
    if fields[LAYER_ARN_REGION_FIELD] != region:
        return f"{arn} is in {fields[LAYER_ARN_REGION_FIELD]}, not in the target region {region}"
    return None


def require_supported_partitions(target_partitions: object, deployment_region: str | None) -> None:
    """Stop synthesis when the app is aimed at a partition the Powertools layer is not published in.

    `target_partitions` is the ``@aws-cdk/core:target-partitions`` context (the partitions the app
    declares it targets); `deployment_region` is the region the CDK CLI deploys to, when known
    (``CDK_DEFAULT_REGION``). A region the CDK does not know is left to deploy-time checks.
    """
    supported = ", ".join(SUPPORTED_PARTITIONS)
    declared = target_partitions
    if isinstance(declared, str):  # `-c` hands values over as text: '["aws-cn"]' or 'aws-cn'
        try:
            declared = json.loads(declared)
        except ValueError:
            declared = [declared]
    declared = declared if isinstance(declared, list) else [] if declared is None else [declared]
    unsupported = sorted({str(partition) for partition in declared} - set(SUPPORTED_PARTITIONS))
    if unsupported:
        raise SettingsError(
            f"cdk.json context '{TARGET_PARTITIONS_CONTEXT}' must list only {supported}, got {unsupported}: "
            "the Powertools layer and its public SSM parameter are published only there"
        )
    partition = RegionInfo.get(deployment_region).partition if deployment_region else None
    if partition is not None and partition not in SUPPORTED_PARTITIONS:
        raise SettingsError(
            f"region {deployment_region} is in partition {partition}; this stack deploys only to {supported} "
            "regions (the Powertools layer and its public SSM parameter are published only there)"
        )


class SharedFunctionAssets(Construct):
    """The code asset, the Powertools layer and the data key, created once and given to every function.

    With `customerManagedKey` the data key encrypts each function's log group and its environment
    variables; without it both keep the services' own encryption at rest.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, settings: PipelineSettings, key: kms.IKey | None
    ) -> None:
        super().__init__(scope, construct_id)
        self.log_key = key
        self.environment_key = key
        self.code: lambda_.Code = function_code()
        self.powertools_layer: lambda_.ILayerVersion = lambda_.LayerVersion.from_layer_version_arn(
            self, "PowertoolsLayer", powertools_layer_arn(self, settings)
        )


class PipelineFunction(Construct):
    """One pipeline function with its own role and its own log group.

    The role starts empty except for writing to the function's log group (instead of the
    account-wide `AWSLambdaBasicExecutionRole`); each stage then grants exactly the table and
    stream actions it performs. The log group is an ordinary resource (not the LogRetention
    custom resource) so that retention and removal are declared in the template itself.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: PipelineSettings,
        assets: SharedFunctionAssets,
        service: str,
        handler: str,
        description: str,
        environment: Mapping[str, str],
        memory_size: int,
        timeout: Duration,
    ) -> None:
        super().__init__(scope, construct_id)
        self.log_group = logs.LogGroup(
            self,
            "LogGroup",
            encryption_key=assets.log_key,
            retention=settings.log_retention,
            removal_policy=settings.removal_policy,
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Execution role of the {service} function",
        )
        self.log_group.grant_write(self.role)
        self.function = lambda_.Function(
            self,
            "Function",
            description=description,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            code=assets.code,
            handler=handler,
            layers=[assets.powertools_layer],
            memory_size=memory_size,
            timeout=timeout,
            role=self.role,
            log_group=self.log_group,
            environment_encryption=assets.environment_key,
            environment={
                "POWERTOOLS_SERVICE_NAME": service,
                "POWERTOOLS_METRICS_NAMESPACE": stack_metrics_namespace(Stack.of(self).stack_name),
                **environment,
            },
        )
