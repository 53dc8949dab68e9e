"""What the three pipeline functions share: code asset, runtime, Powertools layer, role, logs.

Nothing here needs Docker: the asset is the plain `lambdas/` directory (the domain and the
handlers use only the standard library, boto3 and Powertools) and Powertools comes from the
AWS-managed public layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

from aws_cdk import Aws, Duration
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks.settings import PipelineSettings

LAMBDA_SOURCE_DIR: Final[Path] = Path(__file__).resolve().parent.parent / "lambdas"

RUNTIME: Final[lambda_.Runtime] = lambda_.Runtime.PYTHON_3_14
"""The newest Python runtime CDK knows (cdk-nag AwsSolutions-L1 accepts nothing older).

The code is kept compatible with Python 3.11, which the local runtime and the tests use."""

ARCHITECTURE: Final[lambda_.Architecture] = lambda_.Architecture.ARM_64

POWERTOOLS_LAYER_ACCOUNT: Final[str] = "017000801446"
"""The AWS account that publishes the public Powertools for AWS Lambda (Python) layers."""

METRICS_NAMESPACE: Final[str] = "ExactlyOnceAggregation"

ASSET_EXCLUDES: Final[list[str]] = [
    "**/__pycache__",
    "**/*.pyc",
    "**/tests",
    "**/test_*.py",
    "**/.pytest_cache",
    "**/.mypy_cache",
    "**/.ruff_cache",
]


def powertools_layer_arn(settings: PipelineSettings) -> str:
    """The regional ARN of the AWS-managed Powertools v3 layer matching runtime and architecture.

    Name format: ``AWSLambdaPowertoolsPythonV3-<python3XX>-<arm64|x86_64>:<version>``; the region
    is the deployment region (a token), so one template serves every region.
    """
    runtime_tag = RUNTIME.name.replace(".", "")  # python3.14 -> python314
    return (
        f"arn:aws:lambda:{Aws.REGION}:{POWERTOOLS_LAYER_ACCOUNT}:layer:"
        f"AWSLambdaPowertoolsPythonV3-{runtime_tag}-{ARCHITECTURE.name}:{settings.powertools_layer_version}"
    )


class SharedFunctionAssets(Construct):
    """The code asset and the Powertools layer, created once and given to every function."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: PipelineSettings) -> None:
        super().__init__(scope, construct_id)
        self.code: lambda_.Code = lambda_.Code.from_asset(str(LAMBDA_SOURCE_DIR), exclude=ASSET_EXCLUDES)
        self.powertools_layer: lambda_.ILayerVersion = lambda_.LayerVersion.from_layer_version_arn(
            self, "PowertoolsLayer", powertools_layer_arn(settings)
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
        reserved_concurrent_executions: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.log_group = logs.LogGroup(
            self,
            "LogGroup",
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
            reserved_concurrent_executions=reserved_concurrent_executions,
            environment={
                "POWERTOOLS_SERVICE_NAME": service,
                "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
                **environment,
            },
        )
