"""Finding the deployed pipeline: its resource names, endpoint, region and credentials.

Every operator tool (producer, frontend, audit) must talk to the same pipeline, so they
all look in the same order, most explicit first (docs/architecture.md):

1. ``--stack-name NAME``: the CloudFormation outputs of that stack (``StreamName``,
   ``StateTableName``, ...; see :data:`STACK_OUTPUT_KEYS`), on AWS, or in the emulator
   when ``AWS_ENDPOINT_URL`` is set;
2. otherwise the local runtime's outputs file, ``.local/outputs.json`` unless
   ``--outputs`` names another (written by ``make up``; the same names under the keys of
   :data:`STACK_OUTPUT_KEYS`, plus ``endpoint_url`` and ``region``);
3. otherwise, when ``AWS_ENDPOINT_URL`` is set, the default stack's outputs there;
4. otherwise nothing: each tool says in one line what to pass.

The endpoint: ``AWS_ENDPOINT_URL``, when set, wins over the file's ``endpoint_url``
(point a tool at another emulator without editing the file). The region: ``--region``,
else the file's, else, against an emulator, ``AWS_DEFAULT_REGION`` or ``us-east-1``,
else the SDK's usual lookup. Credentials: against an emulator (an endpoint is set),
dummy ones unless the environment names some (``AWS_ACCESS_KEY_ID`` or
``AWS_PROFILE``): the emulator accepts any, and real ones are never needed locally.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from aggregation.names import (
    AGGREGATE_TABLE_OUTPUT,
    ARCHIVE_BUCKET_OUTPUT,
    DASHBOARD_URL_OUTPUT,
    DELTA_TABLE_OUTPUT,
    LEGACY_METRICS_NAMESPACE,
    METRICS_NAMESPACE_OUTPUT,
    QUARANTINE_TABLE_OUTPUT,
    STATE_TABLE_OUTPUT,
    STREAM_OUTPUT,
)
from toolkit.files import UnreadableFile, read_json

if TYPE_CHECKING:
    from mypy_boto3_cloudformation import CloudFormationClient
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_kinesis import KinesisClient

DEFAULT_STACK_NAME: Final = "ExactlyOnceAggregation"
DEFAULT_OUTPUTS_PATH: Final = Path(os.environ.get("LOCAL_STATE_DIR") or ".local") / "outputs.json"
"""Where `make up` writes its outputs (`local/paths.py`): clients follow ``$LOCAL_STATE_DIR`` as it does."""
LOCAL_DEFAULT_REGION: Final = "us-east-1"
DUMMY_CREDENTIAL: Final = "testing"
"""Access key and secret for the emulator, which accepts any."""

STACK_OUTPUT_KEYS: Final = {
    STREAM_OUTPUT: "stream_name",
    STATE_TABLE_OUTPUT: "state_table",
    DELTA_TABLE_OUTPUT: "delta_table",
    AGGREGATE_TABLE_OUTPUT: "aggregate_table",
    QUARANTINE_TABLE_OUTPUT: "quarantine",
    ARCHIVE_BUCKET_OUTPUT: "archive_bucket",
}
"""CloudFormation output key (docs/architecture.md) -> key in ``.local/outputs.json`` and field here."""


class TargetError(Exception):
    """The pipeline could not be located or lacks a resource; the message is one line for the operator."""


def environment_endpoint() -> str | None:
    """``AWS_ENDPOINT_URL``, when set: the emulator every client should talk to."""
    return os.environ.get("AWS_ENDPOINT_URL") or None


def session(region: str | None, endpoint_url: str | None) -> boto3.Session:
    """A boto3 session; dummy credentials against an emulator unless the environment names some."""
    local = endpoint_url is not None or environment_endpoint() is not None
    if local and not (os.environ.get("AWS_ACCESS_KEY_ID") or os.environ.get("AWS_PROFILE")):
        return boto3.Session(
            aws_access_key_id=DUMMY_CREDENTIAL, aws_secret_access_key=DUMMY_CREDENTIAL, region_name=region
        )
    return boto3.Session(region_name=region)


def client_config(
    region: str | None,
    *,
    sdk_retries: int = 8,
    max_pool_connections: int = 10,
    connect_timeout: float = 10,
    read_timeout: float = 60,
) -> Config:
    """Standard retries (``sdk_retries`` attempts in all) and timeouts; each tool picks its own."""
    return Config(
        region_name=region,
        max_pool_connections=max(10, max_pool_connections),
        retries={"mode": "standard", "total_max_attempts": sdk_retries},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
    )


@dataclass(frozen=True)
class PipelineTarget:
    """The resources of one deployed pipeline and how to reach them ("" for a resource not named).

    ``endpoint_url`` is the endpoint to pass to clients: the outputs file's (or
    ``AWS_ENDPOINT_URL``'s); None for a stack, where the SDK applies ``AWS_ENDPOINT_URL`` itself.
    """

    stream_name: str = ""
    state_table: str = ""
    aggregate_table: str = ""
    delta_table: str = ""
    quarantine: str = ""
    region: str | None = None
    endpoint_url: str | None = None
    source: str = "explicit"
    """Where this came from (``stack X``, ``.local/outputs.json``), for messages."""
    archive_bucket: str = ""
    dashboard_url: str = ""
    """The stack's CloudWatch dashboard (a deployed stack's `DashboardUrl`; none locally)."""
    metrics_namespace: str = ""
    """Where the stack's functions emit their metrics (a deployed stack's `MetricsNamespace`; none locally)."""

    @property
    def from_stack(self) -> bool:
        """Named by a stack's outputs (rather than by an outputs file)."""
        return self.source.startswith("stack ")

    @property
    def is_local(self) -> bool:
        """True when talking to an emulator rather than AWS."""
        return self.endpoint_url is not None or environment_endpoint() is not None

    def require(self, *fields: str) -> PipelineTarget:
        """This target, if it names every resource in ``fields``; else a one-line TargetError."""
        missing = [name for name in fields if not getattr(self, name)]
        if not missing:
            return self
        if self.from_stack:
            keys = [key for key, name in STACK_OUTPUT_KEYS.items() if name in missing]
            raise TargetError(f"{self.source} has no output {', '.join(keys)} (deployed from an older version?)")
        raise TargetError(f"{self.source} has no {', '.join(missing)} (is `make up` still deploying? run it again)")

    def session(self) -> boto3.Session:
        return session(self.region, self.endpoint_url)

    def client(self, service: str, config: Config | None = None) -> Any:
        """A client of ``service`` at this target (default: :func:`client_config`)."""
        return self.session().client(  # type: ignore[call-overload]
            service, endpoint_url=self.endpoint_url, config=config or client_config(self.region)
        )

    def kinesis(self, max_pool_connections: int = 10, sdk_retries: int = 1) -> KinesisClient:
        """A Kinesis client; by default without SDK retries (the sender retries, and counts)."""
        config = client_config(self.region, sdk_retries=sdk_retries, max_pool_connections=max_pool_connections)
        client: KinesisClient = self.client("kinesis", config)
        return client

    def dynamodb(self, max_pool_connections: int = 10, sdk_retries: int = 8) -> DynamoDBClient:
        """A low-level DynamoDB client: numbers stay exact strings until the caller makes Decimals."""
        config = client_config(self.region, sdk_retries=sdk_retries, max_pool_connections=max_pool_connections)
        client: DynamoDBClient = self.client("dynamodb", config)
        return client


def target_from_outputs(path: Path = DEFAULT_OUTPUTS_PATH, region: str | None = None) -> PipelineTarget:
    """The local runtime described by an outputs file (``make up`` writes ``.local/outputs.json``)."""
    try:
        outputs = read_json(path, parse_float=None)
    except UnreadableFile as error:
        raise TargetError(str(error)) from None
    if not isinstance(outputs, dict):
        raise TargetError(f"{path} is not a JSON object")
    names = {name: str(outputs.get(name) or "") for name in STACK_OUTPUT_KEYS.values()}
    endpoint = environment_endpoint() or str(outputs.get("endpoint_url") or "") or None
    if endpoint is None:
        raise TargetError(f"{path} has no endpoint_url (is `make up` still deploying? run it again)")
    region = region or outputs.get("region") or os.environ.get("AWS_DEFAULT_REGION") or LOCAL_DEFAULT_REGION
    return PipelineTarget(region=str(region), endpoint_url=endpoint, source=str(path), **names)


def target_from_stack(stack_name: str, region: str | None = None) -> PipelineTarget:
    """A deployed stack's outputs (``AWS_ENDPOINT_URL`` makes this work against the emulator)."""
    if environment_endpoint() is not None and region is None:
        region = os.environ.get("AWS_DEFAULT_REGION") or LOCAL_DEFAULT_REGION
    try:
        cloudformation: CloudFormationClient = session(region, None).client(
            "cloudformation", config=client_config(region)
        )
        stacks = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    except ClientError as error:
        raise TargetError(f"stack {stack_name}: {error.response.get('Error', {}).get('Message', error)}") from None
    except BotoCoreError as error:
        raise TargetError(f"cannot look up stack {stack_name}: {error}") from None
    if not stacks:
        raise TargetError(f"stack {stack_name} not found")
    outputs = {output["OutputKey"]: output["OutputValue"] for output in stacks[0].get("Outputs", [])}
    names = {name: outputs.get(key, "") for key, name in STACK_OUTPUT_KEYS.items()}
    return PipelineTarget(
        region=region or cloudformation.meta.region_name,
        source=f"stack {stack_name}",
        dashboard_url=outputs.get(DASHBOARD_URL_OUTPUT, ""),
        # A stack deployed by a release before `MetricsNamespace` emits into the namespace all shared then.
        metrics_namespace=outputs.get(METRICS_NAMESPACE_OUTPUT, LEGACY_METRICS_NAMESPACE),
        **names,
    )


def locate_pipeline(
    stack_name: str | None = None,
    region: str | None = None,
    outputs_path: Path | None = None,
    *,
    needs: tuple[str, ...] = (),
    outputs_must_exist: bool = False,
) -> PipelineTarget | None:
    """The pipeline the user means, in the order of this module's docstring; None when nothing names one.

    ``outputs_path`` None: ``.local/outputs.json``. ``outputs_must_exist``: the user named
    the file, so a missing one is an error rather than a reason to look further.
    ``needs``: the resources the caller uses (``"aggregate_table"``, ...); a target
    without one of them is a TargetError naming it.
    """
    outputs_path = outputs_path or DEFAULT_OUTPUTS_PATH
    if stack_name:
        target = target_from_stack(stack_name, region)
    elif outputs_must_exist or outputs_path.exists():
        target = target_from_outputs(outputs_path, region)
    elif environment_endpoint() is not None:
        target = target_from_stack(DEFAULT_STACK_NAME, region)
    else:
        return None
    return target.require(*needs)
