"""Deploy the synthesized CDK app into the emulator, the way `cdk deploy` deploys it into AWS.

The local run must *be* the deployed stack, not a hand-written copy of it, so this module
only ever works from what `cdk synth` wrote to `cdk.out/`:

1. `synthesize` runs the pinned CDK CLI (or reuses a `cdk.out/` newer than every source).
2. `read_cloud_assembly` finds the stack's template and its asset manifest.
3. `publish_assets` zips and uploads every file asset to the bootstrap bucket
   (`cdk-hnb659fds-assets-<account>-<region>`) at the object key the template names, and
   `ensure_bootstrap_version` creates the `/cdk-bootstrap/hnb659fds/version` parameter
   the template's bootstrap-version rule checks: what `cdk bootstrap` provides in AWS.
   `stand_in_public_parameters` gives every public AWS parameter the template reads (the
   Powertools layer ARN) a local stand-in, since nobody can create `/aws/...` names.
4. `deploy_stack` creates (or updates) the CloudFormation stack from the template, and
   `deploy_what_cloudformation_skipped` is the one place that fills any gap in moto's
   CloudFormation from the template's own properties. The one resource moto cannot run, the
   Lambda-backed settings guard, is conditioned out of what moto gets
   (`template_for_the_emulator`), and `run_settings_guard` sends its handler the request
   CloudFormation would, before `create_stack` / `update_stack`, and when it refuses, the
   rollback CloudFormation would send (`StackRolledBack`).
5. `describe_deployment` reads the physical names back from the stack outputs and
   resources: the runner and every client use those, never names of their own.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import logging
import os
import subprocess
import time
import zipfile
from collections.abc import Callable, Iterable, Mapping
from copy import deepcopy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from aggregation.names import (
    AGGREGATE_TABLE_OUTPUT,
    DELTA_TABLE_OUTPUT,
    STATE_SETTINGS_GUARD_TYPE,
    STATE_TABLE_OUTPUT,
    STREAM_OUTPUT,
)
from aggregation.setting_changes import AGGREGATE_TABLE_PROPERTY, UPGRADE_DRAINED, UnreadableStateSettings, settings_id
from local.paths import REPO_ROOT
from settings_guard_function import handler as settings_guard
from toolkit.node_runtime import banner_silencing
from toolkit.pipeline import DUMMY_CREDENTIAL, STACK_OUTPUT_KEYS

log = logging.getLogger(__name__)

EMULATOR_ACCOUNT = "123456789012"
"""moto's fixed account id: what `${AWS::AccountId}` resolves to in the emulator."""
DEFAULT_REGION = "us-east-1"
DEFAULT_STACK_NAME = "ExactlyOnceAggregation"
BOOTSTRAP_QUALIFIER = "hnb659fds"
BOOTSTRAP_VERSION_PARAMETER = f"/cdk-bootstrap/{BOOTSTRAP_QUALIFIER}/version"
MINIMUM_BOOTSTRAP_VERSION = 6

PUBLIC_PARAMETER_PREFIX = "/aws/service/"
LOCAL_STAND_IN_PREFIX = "/local-emulator-stand-in"
"""`/aws/...` names are reserved: AWS (and moto) refuse to create them, so a stand-in lives here."""
LOCAL_POWERTOOLS_LAYER_NAME = "AWSLambdaPowertoolsPythonV3-python314-arm64"
"""The publisher's layer name, as `stacks.functions.powertools_layer_name` builds it (a test keeps
them equal; the deployer does not import the CDK app): the template always names the publisher's
account and this layer, taking only the version from the parameter, so the stand-in is published
under this name in the emulator's account, which moto ignores when it looks a layer up."""


def _local_powertools_layer_arn(region: str) -> str:
    """The Powertools layer locally: the runner imports Powertools from its own Python instead."""
    return f"arn:aws:lambda:{region}:{EMULATOR_ACCOUNT}:layer:{LOCAL_POWERTOOLS_LAYER_NAME}:1"


def ensure_local_powertools_layer(lambda_client: Any) -> None:
    """Publish the stand-in layer (empty) once, as version 1, so that the layer version the
    functions name exists: moto creates functions with any layer ARN but refuses to update one
    whose layer is missing, so without it no redeploy of a changed function could succeed."""
    if lambda_client.list_layer_versions(LayerName=LOCAL_POWERTOOLS_LAYER_NAME)["LayerVersions"]:
        return
    empty = io.BytesIO()
    zipfile.ZipFile(empty, "w").close()
    lambda_client.publish_layer_version(LayerName=LOCAL_POWERTOOLS_LAYER_NAME, Content={"ZipFile": empty.getvalue()})


PUBLIC_PARAMETER_STAND_INS: Mapping[str, Callable[[str], str]] = {
    "/aws/service/powertools/": _local_powertools_layer_arn,
}
"""Public parameter name prefix -> the clearly local value (by region) its stand-in holds."""

OUTPUT_KEYS_TO_LOCAL_NAMES: Mapping[str, str] = STACK_OUTPUT_KEYS
"""Stack output key (docs/architecture.md) -> key in `.local/outputs.json` (docs/design.md,
"Local runtime"), as the tools read it."""

REQUIRED_OUTPUT_KEYS = (STREAM_OUTPUT, STATE_TABLE_OUTPUT, DELTA_TABLE_OUTPUT, AGGREGATE_TABLE_OUTPUT)

SOURCES_THAT_SHAPE_THE_TEMPLATE = ("app.py", "cdk.json", "stacks", "lambdas", "constraints.txt")
"""What `cdk synth` reads: `cdk.out/` older than any of these is stale. constraints.txt pins the
protobuf whose Python files the functions' asset is bundled with (`stacks/functions.py`)."""

RESOURCE_TYPES_THAT_MAY_BE_MISSING = frozenset(
    {
        "AWS::CloudWatch::Alarm",  # moto skips alarms with a warning; nothing local watches them
        "AWS::CloudWatch::Dashboard",
        "AWS::CDK::Metadata",
        "AWS::Lambda::LayerVersion",  # Powertools comes from the runner's Python locally
        "AWS::S3::BucketPolicy",  # the emulator enforces no resource policies
        "AWS::SNS::TopicPolicy",  # (the alarm topic's: TLS only, CloudWatch may publish)
        # Not AWS::IAM::Policy: the emulator enforces the functions' roles' policies
        # (`local.emulator.iam_check`), so a role without its policy would be a different pipeline.
        # Auto scaling of provisioned tables (`stateTableCapacity` ...): moto's CloudFormation
        # knows neither type, and its DynamoDB never throttles on provisioned capacity, so
        # there is nothing for auto scaling to adjust; the tables are created provisioned.
        "AWS::ApplicationAutoScaling::ScalableTarget",
        "AWS::ApplicationAutoScaling::ScalingPolicy",
        # The settings guard: conditioned out of the emulator's template, its handler run by the
        # deployer itself (`run_settings_guard`).
        STATE_SETTINGS_GUARD_TYPE,
    }
)
"""Template resources whose absence from the emulated stack changes nothing the pipeline does."""


class DeploymentError(RuntimeError):
    """The app could not be synthesized or deployed; the message says why in one line."""


class StackRolledBack(DeploymentError):
    """The settings guard refused the deploy, and the stack was rolled back as CloudFormation
    rolls it back (`run_settings_guard`): `status` is where the rollback ended,
    UPDATE_ROLLBACK_COMPLETE (the settings deployed still run) or UPDATE_ROLLBACK_FAILED."""

    def __init__(self, refusal: str, status: str) -> None:
        super().__init__(f"{refusal} (the stack ended {status})")
        self.refusal = refusal
        self.status = status


@dataclass(frozen=True)
class FileAsset:
    """One file asset of the cloud assembly and where the template expects it in S3."""

    source_path: Path
    packaging: str  # "zip" (a directory, zipped on upload) or "file" (uploaded as is)
    bucket_name: str
    object_key: str


@dataclass(frozen=True)
class CloudAssembly:
    """The parts of `cdk.out/` one stack deployment needs."""

    stack_name: str
    template: dict[str, Any]
    template_body: str
    assets: tuple[FileAsset, ...]
    required_bootstrap_version: int

    @property
    def template_sha256(self) -> str:
        return hashlib.sha256(self.template_body.encode()).hexdigest()


@dataclass(frozen=True)
class StackResource:
    logical_id: str
    resource_type: str
    physical_id: str


@dataclass
class Deployment:
    """What is deployed: the template it came from, its outputs and its physical resources."""

    stack_name: str
    region: str
    endpoint_url: str
    template: dict[str, Any]
    template_sha256: str
    outputs: dict[str, str]
    resources: dict[str, StackResource] = field(default_factory=dict)

    def physical_id(self, logical_id: str) -> str:
        return self.resources[logical_id].physical_id

    def local_outputs(self) -> dict[str, str]:
        """The `.local/outputs.json` content (docs/design.md, "Local runtime")."""
        names = {
            local_key: self.outputs[output_key]
            for output_key, local_key in OUTPUT_KEYS_TO_LOCAL_NAMES.items()
            if output_key in self.outputs
        }
        return {"endpoint_url": self.endpoint_url, "region": self.region, **names}

    def to_json(self) -> dict[str, Any]:
        return {
            "stack_name": self.stack_name,
            "region": self.region,
            "endpoint_url": self.endpoint_url,
            "template_sha256": self.template_sha256,
            "outputs": self.outputs,
            "resources": {
                logical_id: {"type": r.resource_type, "physical_id": r.physical_id}
                for logical_id, r in self.resources.items()
            },
            "template": self.template,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Deployment:
        return cls(
            stack_name=data["stack_name"],
            region=data["region"],
            endpoint_url=data["endpoint_url"],
            template=data["template"],
            template_sha256=data["template_sha256"],
            outputs=dict(data["outputs"]),
            resources={
                logical_id: StackResource(logical_id, r["type"], r["physical_id"])
                for logical_id, r in data["resources"].items()
            },
        )


# ------------------------------------------------------------------------ clients


CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 10}, connect_timeout=5, read_timeout=30)
"""Retries ride out the throttling and lost responses the emulator can inject (`local.emulator.injected_faults`)."""


def aws_client(service: str, endpoint_url: str, region: str = DEFAULT_REGION) -> Any:
    """A boto3 client for the emulator (dummy credentials: moto accepts any)."""
    return boto3.client(
        service,  # type: ignore[call-overload]
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id=DUMMY_CREDENTIAL,
        aws_secret_access_key=DUMMY_CREDENTIAL,
        config=CLIENT_CONFIG,
    )


# --------------------------------------------------------------------- synthesis


def _newest_mtime(paths: Iterable[Path]) -> float:
    newest = 0.0
    for path in paths:
        if path.is_file():
            newest = max(newest, path.stat().st_mtime)
        elif path.is_dir():
            for child in path.rglob("*"):
                if child.is_file() and "__pycache__" not in child.parts:
                    newest = max(newest, child.stat().st_mtime)
    return newest


def cloud_assembly_is_fresh(cdk_out: Path, repo_root: Path = REPO_ROOT) -> bool:
    """Whether `cdk_out` was written after every file `cdk synth` reads."""
    manifest = cdk_out / "manifest.json"
    if not manifest.is_file():
        return False
    sources = [repo_root / name for name in SOURCES_THAT_SHAPE_THE_TEMPLATE]
    return manifest.stat().st_mtime >= _newest_mtime(sources)


def synthesize(repo_root: Path = REPO_ROOT, *, force: bool = False) -> Path:
    """`cdk synth` into `<repo>/cdk.out` unless it is already fresh; returns the directory.

    Uses the pinned CLI from `node_modules/.bin` with the venv's Python first on PATH
    (the CDK app is Python), as `make synth` does.
    """
    cdk_out = repo_root / "cdk.out"
    lock_path = repo_root / ".local" / "synth.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:  # one synth at a time (parallel tests share cdk.out)
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and cloud_assembly_is_fresh(cdk_out, repo_root):
            log.info("reusing %s (newer than every source)", cdk_out)
            return cdk_out
        run_cdk_synth(repo_root, tools_root=repo_root)
    return cdk_out


def run_cdk_synth(
    app_dir: Path,
    *,
    tools_root: Path = REPO_ROOT,
    python_path: Iterable[Path] = (),
    output: Path | None = None,
    context: Mapping[str, str] | None = None,
) -> None:
    """`cdk synth --quiet` of the CDK app in `app_dir` into `output` (default `app_dir/cdk.out`),
    with the pinned CLI and the venv of `tools_root`, `context` as `-c key=value`; `python_path`
    goes first on the app's PYTHONPATH, so that an older release's tree (`local.upgrade`)
    imports its own packages, not this checkout's."""
    cdk = tools_root / "node_modules" / ".bin" / "cdk"
    if not cdk.exists():
        raise DeploymentError(f"the CDK CLI is not installed at {cdk}: run `make install`")
    venv_bin = tools_root / ".venv" / "bin"
    first = os.pathsep.join(str(path) for path in python_path)
    inherited = os.environ.get("PYTHONPATH", "")
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(part for part in (first, inherited) if part),
        "PATH": os.pathsep.join([str(venv_bin), str(cdk.parent), os.environ.get("PATH", "")]),
        **banner_silencing(os.environ),  # the Makefile's list of Node majors, or ours: never a bare "1"
        "CDK_DISABLE_VERSION_CHECK": "1",
        "CDK_DISABLE_CLI_TELEMETRY": "true",
    }
    started = time.monotonic()
    completed = subprocess.run(
        [
            str(cdk),
            "synth",
            "--quiet",
            *(["--output", str(output)] if output is not None else []),
            *(argument for key, value in (context or {}).items() for argument in ("-c", f"{key}={value}")),
        ],
        cwd=app_dir,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        tail = (completed.stderr or completed.stdout).strip().splitlines()[-15:]
        raise DeploymentError("cdk synth failed:\n" + "\n".join(tail))
    log.info("cdk synth took %.1f s", time.monotonic() - started)


def read_cloud_assembly(
    cdk_out: Path,
    stack_name: str | None = None,
    *,
    account: str = EMULATOR_ACCOUNT,
    region: str = DEFAULT_REGION,
) -> CloudAssembly:
    """The template, assets and bootstrap requirement of one stack in `cdk_out`.

    `stack_name` None takes the only stack of the assembly.
    """
    try:
        manifest = json.loads((cdk_out / "manifest.json").read_text())
    except (OSError, ValueError) as error:
        raise DeploymentError(f"no readable cloud assembly in {cdk_out}: {error}") from error
    artifacts: dict[str, Any] = manifest.get("artifacts", {})
    stacks = {
        name: artifact for name, artifact in artifacts.items() if artifact.get("type") == "aws:cloudformation:stack"
    }
    if stack_name is None:
        if len(stacks) != 1:
            raise DeploymentError(f"{cdk_out} holds stacks {sorted(stacks)}: name the one to deploy")
        stack_name = next(iter(stacks))
    stack_artifact = stacks.get(stack_name)
    if stack_artifact is None:
        raise DeploymentError(f"{cdk_out} holds no stack {stack_name!r} (it has {sorted(stacks)})")
    properties = stack_artifact.get("properties", {})
    template_body = (cdk_out / properties["templateFile"]).read_text()
    assets: list[FileAsset] = []
    for dependency in stack_artifact.get("dependencies", []):
        artifact = artifacts.get(dependency, {})
        if artifact.get("type") == "cdk:asset-manifest":
            asset_manifest = cdk_out / artifact["properties"]["file"]
            assets.extend(read_file_assets(asset_manifest, account=account, region=region))
    return CloudAssembly(
        stack_name=properties.get("stackName", stack_name),
        template=json.loads(template_body),
        template_body=template_body,
        assets=tuple(assets),
        required_bootstrap_version=int(properties.get("requiresBootstrapStackVersion", 0)),
    )


def _substitute_environment(text: str, account: str, region: str) -> str:
    return (
        text.replace("${AWS::AccountId}", account).replace("${AWS::Region}", region).replace("${AWS::Partition}", "aws")
    )


def read_file_assets(asset_manifest: Path, *, account: str, region: str) -> list[FileAsset]:
    """Every file asset of a `*.assets.json` with its destination resolved for the emulator."""
    manifest = json.loads(asset_manifest.read_text())
    if manifest.get("dockerImages"):
        raise DeploymentError("the app has Docker image assets; the local runtime deploys only file assets")
    assets = []
    for entry in manifest.get("files", {}).values():
        source = entry["source"]
        if "path" not in source:
            raise DeploymentError(f"asset {entry.get('displayName')} is built by a command; not supported")
        for destination in entry["destinations"].values():
            assets.append(
                FileAsset(
                    source_path=asset_manifest.parent / source["path"],
                    packaging=source.get("packaging", "file"),
                    bucket_name=_substitute_environment(destination["bucketName"], account, region),
                    object_key=_substitute_environment(destination["objectKey"], account, region),
                )
            )
    return assets


# ------------------------------------------------------------------- publishing


def zip_directory(directory: Path) -> bytes:
    """A deterministic zip of `directory` (sorted entries, fixed timestamps), as the CDK packs it."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(directory.rglob("*")):
            if path.is_dir() or "__pycache__" in path.parts:
                continue
            info = zipfile.ZipInfo(path.relative_to(directory).as_posix(), date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (path.stat().st_mode & 0o777) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def asset_bytes(asset: FileAsset) -> bytes:
    if asset.packaging == "zip" and asset.source_path.is_dir():
        return zip_directory(asset.source_path)
    return asset.source_path.read_bytes()


def publish_assets(s3: Any, assets: Iterable[FileAsset]) -> int:
    """Upload every asset to its bucket and key (creating the bucket); returns how many."""
    created_buckets: set[str] = set()
    count = 0
    for asset in assets:
        if asset.bucket_name not in created_buckets:
            try:
                s3.head_bucket(Bucket=asset.bucket_name)
            except ClientError:
                s3.create_bucket(Bucket=asset.bucket_name)
            created_buckets.add(asset.bucket_name)
        s3.put_object(Bucket=asset.bucket_name, Key=asset.object_key, Body=asset_bytes(asset))
        count += 1
    return count


def ensure_bootstrap_version(ssm: Any, required_version: int) -> None:
    """Create or raise `/cdk-bootstrap/hnb659fds/version`, which the template's rule reads."""
    version = max(required_version, MINIMUM_BOOTSTRAP_VERSION)
    try:
        current = int(ssm.get_parameter(Name=BOOTSTRAP_VERSION_PARAMETER)["Parameter"]["Value"])
    except ClientError:
        current = -1
    if current < version:
        ssm.put_parameter(Name=BOOTSTRAP_VERSION_PARAMETER, Value=str(version), Type="String", Overwrite=True)


def _parameter_exists(ssm: Any, name: str) -> bool:
    try:
        ssm.get_parameter(Name=name)
    except ssm.exceptions.ParameterNotFound:
        return False
    return True


def stand_in_public_parameters(ssm: Any, template: Mapping[str, Any], region: str) -> list[dict[str, str]]:
    """Local stand-ins for the public SSM parameters the template's parameters default to.

    A template parameter of type ``AWS::SSM::Parameter::Value<...>`` holds the *name* of an SSM
    parameter; CloudFormation resolves it at deploy time. The emulator has none of AWS's public
    ``/aws/service/...`` parameters beyond moto's own few, and that prefix is reserved, so each
    one it lacks gets a stand-in under `LOCAL_STAND_IN_PREFIX` with a clearly local value, and
    the returned CloudFormation ``Parameters`` point the template parameter at it. A public
    parameter without a known stand-in stops the deployment with a message naming it.
    """
    overrides: list[dict[str, str]] = []
    for key, parameter in template.get("Parameters", {}).items():
        name = str(parameter.get("Default", ""))
        reads_ssm = str(parameter.get("Type", "")).startswith("AWS::SSM::Parameter::Value")
        if not reads_ssm or not name.startswith(PUBLIC_PARAMETER_PREFIX) or _parameter_exists(ssm, name):
            continue  # not a public parameter, or one moto ships (a few AMI and region parameters)
        stand_in = next(
            (value for prefix, value in PUBLIC_PARAMETER_STAND_INS.items() if name.startswith(prefix)), None
        )
        if stand_in is None:
            raise DeploymentError(
                f"template parameter {key} reads the public SSM parameter {name}, which the emulator lacks: "
                "add a stand-in to local.deploy.deployer.PUBLIC_PARAMETER_STAND_INS"
            )
        local_name = LOCAL_STAND_IN_PREFIX + name
        ssm.put_parameter(Name=local_name, Value=stand_in(region), Type="String", Overwrite=True)
        overrides.append({"ParameterKey": key, "ParameterValue": local_name})
    return overrides


# ------------------------------------------------------------------- the stack


def _wait_for_stack(cloudformation: Any, stack_name: str, timeout_seconds: float = 120.0) -> str:
    deadline = time.monotonic() + timeout_seconds
    while True:
        status = str(cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]["StackStatus"])
        if not status.endswith("_IN_PROGRESS"):
            return status
        if time.monotonic() > deadline:
            raise DeploymentError(f"stack {stack_name} still {status} after {timeout_seconds:.0f} s")
        time.sleep(0.2)


def _deployed_template_body(cloudformation: Any, stack_name: str) -> str | None:
    try:
        body = cloudformation.get_template(StackName=stack_name)["TemplateBody"]
    except ClientError:
        return None
    return body if isinstance(body, str) else json.dumps(body)


EMULATOR_SKIPS_CONDITION = "LocalEmulatorCannotInvokeCustomResources"
"""The condition, false, that keeps the settings guard out of the emulator's stack."""


def template_for_the_emulator(template: Mapping[str, Any]) -> dict[str, Any]:
    """The template with the settings guard conditioned out, as the emulator's CloudFormation gets it.

    moto would invoke the guard's provider function (which needs Docker) and then wait for an
    answer that never comes; `run_settings_guard` answers the guard's request instead. The guard
    stays in the deployed template, properties and all, under a condition that is always false,
    so the next deploy reads the settings deployed from it; the other resources' `DependsOn` on
    it are dropped (nothing may depend on a resource that is not created).
    """
    guards = {
        logical_id
        for logical_id, resource in template.get("Resources", {}).items()
        if resource.get("Type") == STATE_SETTINGS_GUARD_TYPE
    }
    emulated = deepcopy(dict(template))
    if not guards:
        return emulated
    emulated.setdefault("Conditions", {})[EMULATOR_SKIPS_CONDITION] = {"Fn::Equals": ["emulator", "CloudFormation"]}
    for logical_id, resource in emulated["Resources"].items():
        if logical_id in guards:
            resource["Condition"] = EMULATOR_SKIPS_CONDITION
        depends_on = resource.get("DependsOn")
        if depends_on is not None:
            names = [depends_on] if isinstance(depends_on, str) else depends_on
            kept = [name for name in names if name not in guards]
            if kept:
                resource["DependsOn"] = kept
            else:
                del resource["DependsOn"]
    return emulated


def _guard(template: Mapping[str, Any] | None) -> tuple[str, Mapping[str, Any]] | None:
    """The settings guard's logical id and properties, when the template has one."""
    for logical_id, resource in (template or {}).get("Resources", {}).items():
        if resource.get("Type") == STATE_SETTINGS_GUARD_TYPE:
            return logical_id, resource.get("Properties", {})
    return None


def run_settings_guard(
    deployed_template: Mapping[str, Any] | None,
    new_template: Mapping[str, Any],
    *,
    holds_state: Callable[[str], bool],
    drained: bool = False,
) -> None:
    """Play CloudFormation's part for the settings guard: send its handler the Create or Update
    request the deploy makes; when it refuses, roll the guard back as CloudFormation does
    (`_roll_back`) and stop with its one-line reason and where the stack ended (`StackRolledBack`).

    The request is CloudFormation's (`RequestType`, `ResourceType`, `LogicalResourceId`,
    `ResourceProperties` and, on an update, `OldResourceProperties` read from the deployed
    template); the handler is the very code the stack deploys (`settings_guard_function`), so
    the local deploy refuses exactly what a `cdk deploy` would. An unchanged guard is not called,
    as CloudFormation calls a custom resource only when its properties change; a deployed
    template without a guard (a release before it) gets a Create, as on AWS, whose handler
    reads the AggregateTable for state. Two differences from CloudFormation's request: the table
    is named by its logical id (the template's `Ref`), which `holds_state` resolves and reads
    (`deploy_stack`), and `drained` (the caller's declaration, `up --drained`) sets the property
    that `-c upgradeDrained=true` sets on AWS. The physical id an Update carries is the one the
    guard gave the deployed settings (`settings_id`), as CloudFormation keeps it.
    """
    new = _guard(new_template)
    if new is None:
        return
    logical_id, properties = new
    deployed = _guard(deployed_template)
    if deployed is not None and deployed[1] == properties:
        return
    sent = _as_sent(properties, drained=drained)
    event: dict[str, Any] = {
        "RequestType": "Create",
        "ResourceType": STATE_SETTINGS_GUARD_TYPE,
        "LogicalResourceId": logical_id,
        "ResourceProperties": sent,
    }
    held: dict[str, Any] = {}
    if deployed is not None:
        # The id the guard gave the deployed settings, which CloudFormation holds and sends.
        held = _as_sent(deployed[1], drained=False)
        event |= {"RequestType": "Update", "OldResourceProperties": held, "PhysicalResourceId": settings_id(held)}
    try:
        settings_guard.answer(event, holds_state)
    except (settings_guard.SettingChangeRefused, UnreadableStateSettings) as error:
        if deployed_template is None:
            raise DeploymentError(str(error)) from None  # a new stack: nothing to roll back to
        raise StackRolledBack(str(error), _roll_back(event, held, holds_state)) from None


def _as_sent(properties: Mapping[str, Any], *, drained: bool) -> dict[str, Any]:
    """The guard's template properties as CloudFormation sends them: the table named by its
    logical id (`holds_state` resolves it), `UpgradeDrained` added when the caller declares it."""
    sent = dict(properties)
    table = properties.get(AGGREGATE_TABLE_PROPERTY)
    if isinstance(table, Mapping) and "Ref" in table:
        sent[AGGREGATE_TABLE_PROPERTY] = table["Ref"]
    if drained:
        sent[UPGRADE_DRAINED] = "true"
    return sent


def _roll_back(failed: Mapping[str, Any], held: Mapping[str, Any], holds_state: Callable[[str], bool]) -> str:
    """What CloudFormation does with the guard when its request failed; where the stack ends.

    A failed Update keeps its physical id (the CDK provider framework answers FAILED with the
    request's), and CloudFormation rolls it back with the reverse Update: the settings deployed as
    `ResourceProperties`, the refused ones as `OldResourceProperties` (aws-cdk issue 17040). A
    failed Create (a guard new to an existing stack) gets the framework's marker id, and the
    framework answers the Delete of the rollback itself, never calling the handler
    (`CREATE_FAILED_PHYSICAL_ID_MARKER`, its `cfn-response.js`). Nothing else was updated: every
    function and mapping depends on the guard, and this deployer calls `update_stack` only after
    the guard accepted."""
    if failed["RequestType"] == "Create":
        return "UPDATE_ROLLBACK_COMPLETE"
    rollback = {**failed, "ResourceProperties": dict(held), "OldResourceProperties": failed["ResourceProperties"]}
    try:
        settings_guard.answer(rollback, holds_state)
    except (settings_guard.SettingChangeRefused, UnreadableStateSettings) as error:
        log.error("the rollback of the settings guard failed: %s", error)
        return "UPDATE_ROLLBACK_FAILED"
    return "UPDATE_ROLLBACK_COMPLETE"


def created_empty(_logical_id: str) -> bool:
    """`holds_state` of a stack not deployed yet: its tables are created empty."""
    return False


def aggregate_state_reader(cloudformation: Any, dynamodb: Any, stack_name: str) -> Callable[[str], bool]:
    """`holds_state` for `run_settings_guard`: by logical id, whether that table of the deployed
    stack holds state (`settings_guard.table_holds_state`). A table the stack does not have yet
    (one this deploy adds) is created empty, as on AWS before the guard runs."""

    def holds_state(logical_id: str) -> bool:
        table = list_stack_resources(cloudformation, stack_name).get(logical_id)
        return table is not None and settings_guard.table_holds_state(dynamodb, table.physical_id)

    return holds_state


def deploy_stack(
    cloudformation: Any,
    assembly: CloudAssembly,
    parameters: Iterable[Mapping[str, str]] = (),
    *,
    dynamodb: Any,
    drained: bool = False,
) -> str:
    """Create the stack, or update it when its template changed (and the settings guard accepts
    the change: `run_settings_guard`, told whether the pipeline is `drained`, reading the stack's
    tables with `dynamodb`); returns what was done."""
    emulated = template_for_the_emulator(assembly.template)
    deployed_body = _deployed_template_body(cloudformation, assembly.stack_name)
    deployed = json.loads(deployed_body) if deployed_body is not None else None
    if deployed == emulated:
        return "unchanged"
    holds_state: Callable[[str], bool]
    if deployed is None:
        holds_state = created_empty  # a new stack's tables are created by this deploy
    else:
        holds_state = aggregate_state_reader(cloudformation, dynamodb, assembly.stack_name)
    run_settings_guard(deployed, assembly.template, holds_state=holds_state, drained=drained)
    stack = {
        "StackName": assembly.stack_name,
        "TemplateBody": json.dumps(emulated, indent=1),
        "Parameters": list(parameters),
        "Capabilities": ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
    }
    if deployed is None:
        cloudformation.create_stack(**stack)
        action = "created"
    else:
        cloudformation.update_stack(**stack)
        action = "updated"
    status = _wait_for_stack(cloudformation, assembly.stack_name)
    if status not in ("CREATE_COMPLETE", "UPDATE_COMPLETE"):
        raise DeploymentError(f"stack {assembly.stack_name} ended {status}")
    return action


def deploy_what_cloudformation_skipped(template: Mapping[str, Any], deployed: Mapping[str, StackResource]) -> list[str]:
    """THE fallback: every template resource moto's CloudFormation did not create.

    Resources whose absence changes nothing locally (alarms, dashboards, layers) are
    listed and logged. Any other missing resource type would need deploying here from the
    template's own properties; none does with the current stack (it uses
    `AWS::DynamoDB::Table`, not `GlobalTable`), so such a gap stops the deployment with a
    message naming it rather than a pipeline that silently lacks a part.
    Returns the logical ids that are missing but harmless.
    """
    harmless: list[str] = []
    unsupported: list[str] = []
    for logical_id, resource in template.get("Resources", {}).items():
        if logical_id in deployed or "Condition" in resource:
            continue
        resource_type = resource.get("Type", "?")
        if resource_type in RESOURCE_TYPES_THAT_MAY_BE_MISSING:
            harmless.append(logical_id)
        else:
            unsupported.append(f"{logical_id} ({resource_type})")
    if harmless:
        log.info("emulator skipped %d resource(s) that do not matter locally: %s", len(harmless), harmless)
    if unsupported:
        raise DeploymentError(
            "the emulator's CloudFormation did not create "
            + ", ".join(unsupported)
            + ": add a fallback for that type in local.deploy.deployer.deploy_what_cloudformation_skipped"
        )
    return harmless


def list_stack_resources(cloudformation: Any, stack_name: str) -> dict[str, StackResource]:
    resources: dict[str, StackResource] = {}
    for page in cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack_name):
        for summary in page["StackResourceSummaries"]:
            resources[summary["LogicalResourceId"]] = StackResource(
                summary["LogicalResourceId"], summary["ResourceType"], summary.get("PhysicalResourceId", "")
            )
    return resources


def describe_deployment(cloudformation: Any, assembly: CloudAssembly, *, endpoint_url: str, region: str) -> Deployment:
    """Physical names from the stack's outputs and resources (never from our own constants)."""
    stack = cloudformation.describe_stacks(StackName=assembly.stack_name)["Stacks"][0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    return Deployment(
        stack_name=assembly.stack_name,
        region=region,
        endpoint_url=endpoint_url,
        template=assembly.template,
        template_sha256=assembly.template_sha256,
        outputs=outputs,
        resources=list_stack_resources(cloudformation, assembly.stack_name),
    )


def deploy(
    cdk_out: Path,
    endpoint_url: str,
    *,
    stack_name: str | None = None,
    region: str = DEFAULT_REGION,
    require_outputs: Iterable[str] = (),
    drained: bool = False,
) -> Deployment:
    """Publish the assets and deploy one stack of `cdk_out` into the emulator at `endpoint_url`
    (`drained`: the caller declares no batch in flight, `run_settings_guard`)."""
    assembly = read_cloud_assembly(cdk_out, stack_name, region=region)
    started = time.monotonic()
    uploaded = publish_assets(aws_client("s3", endpoint_url, region), assembly.assets)
    ssm = aws_client("ssm", endpoint_url, region)
    ensure_bootstrap_version(ssm, assembly.required_bootstrap_version)
    parameters = stand_in_public_parameters(ssm, assembly.template, region)
    ensure_local_powertools_layer(aws_client("lambda", endpoint_url, region))
    cloudformation = aws_client("cloudformation", endpoint_url, region)
    try:
        action = deploy_stack(
            cloudformation, assembly, parameters, dynamodb=aws_client("dynamodb", endpoint_url, region), drained=drained
        )
    except ClientError as error:
        raise DeploymentError(f"CloudFormation refused the template: {error}") from error
    deployment = describe_deployment(cloudformation, assembly, endpoint_url=endpoint_url, region=region)
    deploy_what_cloudformation_skipped(assembly.template, deployment.resources)
    missing = [key for key in require_outputs if key not in deployment.outputs]
    if missing:
        raise DeploymentError(f"stack {assembly.stack_name} has no output(s) {missing}")
    log.info(
        "stack %s %s (%d assets, %d resources) in %.1f s",
        assembly.stack_name,
        action,
        uploaded,
        len(deployment.resources),
        time.monotonic() - started,
    )
    return deployment
