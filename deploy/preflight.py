"""Preflight: what a first `cdk deploy` needs from the account and region, read before deploying.

Each check reads the account with boto3 (read-only calls) and gives one line: what passes, or
what to request or change. A check whose API is unavailable (no permission, or an emulator that
lacks it) says "unknown" instead of failing the run; only a known obstacle fails it.

* **credentials**: `sts:GetCallerIdentity`.
* **partition**: the region's partition must be one the Powertools layer is published in.
* **CDK bootstrap**: the `CDKToolkit` stack and its `/cdk-bootstrap/hnb659fds/version` parameter.
* **Powertools layer**: AWS's public SSM parameter for the pinned release, runtime and
  architecture (or the explicitly chosen layer version) exists in the region, and the layer it
  names is a version of the Powertools publisher account's (017000801446) in that region. The
  template runs only the publisher's layer whatever the parameter holds (it takes just the
  version field), so a wrong value here means a parameter that is not AWS's, choosing which
  published version runs. Powertools has gaps (its PR 7695: 3.23.0's arm64 parameters were
  never created) and writes parameters only in the regions its workflow lists; without the
  parameter the line says what to do, and names the `powertoolsLayerVersion` to pin when the
  region holds the very build (same SHA-256) that `REFERENCE_REGION`'s parameter names.
* **concurrency quota** (`lambda:GetAccountSettings`): whether the account's quota holds the
  stages' concurrent executions at the start, reducers included (one per DeltaTable stream shard
  times `reduceParallelizationFactor`). Nothing is reserved, so no quota makes the deploy fail
  (Lambda refuses only a reservation that leaves under 100 unreserved executions): a small quota
  throttles batches, which wait and retry, and is a warning.
* **stack**: a stack of that name left in a state `cdk deploy` cannot update.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, UnknownRegionError

from aggregation.names import STATE_SETTINGS_GUARD_TYPE
from aggregation.setting_changes import StateSettings, unguarded_upgrade_refusal
from local.deploy.deployer import BOOTSTRAP_VERSION_PARAMETER, MINIMUM_BOOTSTRAP_VERSION
from stacks.functions import (
    POWERTOOLS_VERSION,
    SUPPORTED_PARTITIONS,
    powertools_layer_arn_for_version,
    powertools_layer_arn_problem,
    powertools_layer_parameter_name,
)
from stacks.settings import PipelineSettings

BOOTSTRAP_STACK: Final = "CDKToolkit"
ESTABLISHED_ACCOUNT_QUOTA: Final = 1000
CONCURRENCY_QUOTA_CODE: Final = "L-B99A9384"
"""Service Quotas code of Lambda's "Concurrent executions"."""
KINESIS_ON_DEMAND_INITIAL_SHARDS: Final = 4
TABLE_STREAM_SHARDS_AT_START: Final = 1
"""A new table's stream starts with one shard; it grows with the table's partitions."""
HEALTHY_STACK_STATES: Final = frozenset(
    {"CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE", "IMPORT_COMPLETE", "IMPORT_ROLLBACK_COMPLETE"}
)
UNUSABLE_STACK_STATES: Final = {
    "ROLLBACK_COMPLETE": "delete it first (`npx cdk destroy`), it cannot be updated",
    "ROLLBACK_FAILED": "delete it first (`npx cdk destroy`), it cannot be updated",
    "DELETE_FAILED": "finish deleting it (`aws cloudformation delete-stack`)",
    "UPDATE_ROLLBACK_FAILED": "recover it with `aws cloudformation continue-update-rollback`",
}
REFERENCE_REGION: Final = "us-east-1"
"""Where to read the pinned release's parameter when the target region has none: a region the
Powertools publishing workflow has always listed."""
CLIENT_CONFIG: Final = Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=5, read_timeout=20)
PERMISSION_ERRORS: Final = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})


class Status(Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Check:
    """One prerequisite: its name, how it stands, and one line saying why or what to do."""

    name: str
    status: Status
    detail: str


@dataclass(frozen=True)
class DeploymentPlan:
    """What the stack will ask of the account, from the same settings `cdk deploy` reads."""

    stack_name: str
    state_parallelization_factor: int
    reduce_parallelization_factor: int
    powertools_parameter: str
    powertools_layer_version: int | None
    kinesis_shards_at_start: int = KINESIS_ON_DEMAND_INITIAL_SHARDS  # a provisioned stream's shardCount
    state_settings: StateSettings | None = None
    """The settings the stored state depends on (None: not judged), for `upgrade_refusal_of`."""

    @classmethod
    def from_settings(cls, settings: PipelineSettings, stack_name: str | None = None) -> DeploymentPlan:
        return cls(
            stack_name=stack_name or settings.stack_name,
            state_parallelization_factor=settings.state_parallelization_factor,
            reduce_parallelization_factor=settings.reduce_parallelization_factor,
            powertools_parameter=powertools_layer_parameter_name(),
            powertools_layer_version=settings.powertools_layer_version,
            kinesis_shards_at_start=settings.stream_mode.shard_count
            if settings.stream_mode.provisioned
            else KINESIS_ON_DEMAND_INITIAL_SHARDS,
            state_settings=settings.state_settings,
        )


@dataclass(frozen=True)
class Account:
    """Where preflight looks: one session (credentials, region; `AWS_ENDPOINT_URL` honoured)."""

    session: boto3.session.Session
    region: str

    def client(self, service: str) -> Any:
        return self.session.client(service, region_name=self.region, config=CLIENT_CONFIG)  # type: ignore[call-overload]


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", "")) or str(
        error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?")
    )


def unreadable(name: str, what: str, error: Exception) -> Check:
    """A check whose API could not be read: no permission, or an emulator without it."""
    if isinstance(error, ClientError):
        code = error_code(error)
        reason = f"no permission ({code})" if code in PERMISSION_ERRORS else f"the API answered {code}"
    else:
        reason = type(error).__name__
    return Check(name, Status.UNKNOWN, f"could not read {what}: {reason}")


# ------------------------------------------------------------------------- the checks


def check_credentials(account: Account) -> tuple[Check, str | None]:
    """The caller's identity; returns the account id too (None: nothing else can be read)."""
    try:
        identity = account.client("sts").get_caller_identity()
    except (ClientError, BotoCoreError) as error:
        detail = f"no usable AWS credentials ({type(error).__name__}): configure a profile or AWS_PROFILE first"
        return Check("credentials", Status.FAIL, detail), None
    return Check("credentials", Status.PASS, f"account {identity['Account']} as {identity['Arn']}"), identity["Account"]


def check_partition(account: Account) -> tuple[Check, str]:
    """The region's partition; returns its name too (the first supported one when unknown)."""
    supported = ", ".join(SUPPORTED_PARTITIONS)
    try:
        partition = account.session.get_partition_for_region(account.region)
    except UnknownRegionError:
        unknown = Check("partition", Status.UNKNOWN, f"region {account.region} is unknown to this SDK")
        return unknown, SUPPORTED_PARTITIONS[0]
    if partition not in SUPPORTED_PARTITIONS:
        detail = (
            f"region {account.region} is in {partition}; deploy to an {supported} region "
            "(the Powertools layer and its public parameter are published only there)"
        )
        return Check("partition", Status.FAIL, detail), partition
    return Check("partition", Status.PASS, f"region {account.region} is in the {partition} partition"), partition


def check_bootstrap(account: Account, account_id: str) -> Check:
    name, bootstrap = "CDK bootstrap", f"`npx cdk bootstrap aws://{account_id}/{account.region}`"
    try:
        stacks = account.client("cloudformation").describe_stacks(StackName=BOOTSTRAP_STACK)["Stacks"]
    except ClientError as error:
        if error_code(error) == "ValidationError":  # CloudFormation's answer for "does not exist"
            return Check(name, Status.FAIL, f"not bootstrapped: run {bootstrap}")
        return unreadable(name, f"the {BOOTSTRAP_STACK} stack", error)
    status = str(stacks[0]["StackStatus"])
    if status not in HEALTHY_STACK_STATES:
        return Check(name, Status.FAIL, f"the {BOOTSTRAP_STACK} stack is {status}: repair it, then run {bootstrap}")
    ssm = account.client("ssm")
    try:
        version = int(ssm.get_parameter(Name=BOOTSTRAP_VERSION_PARAMETER)["Parameter"]["Value"])
    except ssm.exceptions.ParameterNotFound:
        return Check(name, Status.FAIL, f"{BOOTSTRAP_VERSION_PARAMETER} is missing: run {bootstrap} again")
    except (ValueError, KeyError):
        return Check(name, Status.FAIL, f"{BOOTSTRAP_VERSION_PARAMETER} is not a number: run {bootstrap} again")
    if version < MINIMUM_BOOTSTRAP_VERSION:
        return Check(
            name, Status.FAIL, f"bootstrap version {version} < {MINIMUM_BOOTSTRAP_VERSION}: run {bootstrap} to upgrade"
        )
    return Check(name, Status.PASS, f"{BOOTSTRAP_STACK} {status}, bootstrap version {version}")


def check_powertools_layer(account: Account, partition: str, plan: DeploymentPlan) -> Check:
    name = "Powertools layer"
    if plan.powertools_layer_version is not None:
        arn = powertools_layer_arn_for_version(plan.powertools_layer_version, partition, account.region)
        layer, version = arn.rsplit(":", 1)
        lambda_client = account.client("lambda")
        try:
            lambda_client.get_layer_version(LayerName=layer, VersionNumber=int(version))
        except lambda_client.exceptions.ResourceNotFoundException:
            return Check(
                name,
                Status.FAIL,
                f"{arn} does not exist: pick another powertoolsLayerVersion, or 'ssm' for the published one",
            )
        return Check(name, Status.PASS, f"{arn} (powertoolsLayerVersion override)")
    ssm = account.client("ssm")
    try:
        arn = ssm.get_parameter(Name=plan.powertools_parameter)["Parameter"]["Value"]
    except ssm.exceptions.ParameterNotFound:
        missing = f"{account.region} publishes no {plan.powertools_parameter} (Powertools {POWERTOOLS_VERSION})"
        pinnable = same_build_here(account, partition, plan.powertools_parameter)
        if pinnable is None:
            todo = "deploy to another region, or set -c powertoolsLayerVersion=N to a layer version that exists here"
        else:
            todo = (
                f"set -c powertoolsLayerVersion={pinnable} (the same build as {REFERENCE_REGION}'s parameter names), "
                "or deploy to another region"
            )
        return Check(name, Status.FAIL, f"{missing}: {todo}")
    problem = powertools_layer_arn_problem(arn, account.region)
    if problem is not None:
        return Check(name, Status.FAIL, f"{plan.powertools_parameter}: {problem}: do not deploy with it")
    return Check(name, Status.PASS, f"{plan.powertools_parameter} = {arn}")


def same_build_here(account: Account, partition: str, parameter: str) -> int | None:
    """The layer version in the target region that is the build `REFERENCE_REGION`'s `parameter`
    names (the publisher's layer, the same version number and content SHA-256), or None.

    Why the SHA-256: a version number alone is only a number in another region (a region added
    later numbers its versions anew); the same content is the same release. Anything unreadable is
    None: the caller then says what to do without a number.
    """
    if account.region == REFERENCE_REGION:
        return None
    try:
        reference_ssm = account.session.client("ssm", region_name=REFERENCE_REGION, config=CLIENT_CONFIG)
        reference_arn = str(reference_ssm.get_parameter(Name=parameter)["Parameter"]["Value"])
        if powertools_layer_arn_problem(reference_arn, REFERENCE_REGION) is not None:
            return None
        layer, version = reference_arn.rsplit(":", 1)
        reference_lambda = account.session.client("lambda", region_name=REFERENCE_REGION, config=CLIENT_CONFIG)
        reference = reference_lambda.get_layer_version(LayerName=layer, VersionNumber=int(version))
        local_layer = powertools_layer_arn_for_version(int(version), partition, account.region).rsplit(":", 1)[0]
        here = account.client("lambda").get_layer_version(LayerName=local_layer, VersionNumber=int(version))
    except (ClientError, BotoCoreError, ValueError, KeyError):
        return None
    if here["Content"]["CodeSha256"] != reference["Content"]["CodeSha256"]:
        return None
    return int(version)


def concurrency_quota_check(quota: int, plan: DeploymentPlan) -> Check:
    """Whether the account's concurrency quota runs the stages without throttling at the start.

    At the start: state per Kinesis shard (an on-demand stream starts with 4, a provisioned one
    has its `shardCount`) times its parallelization factor; map and archive one
    per table stream shard; reduce one per DeltaTable stream shard times its factor.
    """
    name = "concurrency quota"
    reducers = TABLE_STREAM_SHARDS_AT_START * plan.reduce_parallelization_factor
    starting = (
        plan.kinesis_shards_at_start * plan.state_parallelization_factor
        + 2 * TABLE_STREAM_SHARDS_AT_START  # map and archive
        + reducers
    )
    if quota >= ESTABLISHED_ACCOUNT_QUOTA:
        return Check(
            name,
            Status.PASS,
            f"{quota} concurrent executions; the stages start at about {starting}, {reducers} of them reducers",
        )
    return Check(
        name,
        Status.WARN,
        f"{quota} concurrent executions, shared with the account's other functions, for stages that start at "
        f"about {starting} ({reducers} reducers) and grow as streams split; throttled batches wait and retry "
        f"(nothing is lost): request {ESTABLISHED_ACCOUNT_QUOTA} "
        f"(Service Quotas, Lambda, Concurrent executions, {CONCURRENCY_QUOTA_CODE})",
    )


def check_concurrency(account: Account, plan: DeploymentPlan) -> Check:
    lambda_client = account.client("lambda")
    try:
        limits = lambda_client.get_account_settings()["AccountLimit"]
    except (ClientError, BotoCoreError) as error:
        return unreadable("concurrency quota", "Lambda's account settings", error)
    return concurrency_quota_check(int(limits["ConcurrentExecutions"]), plan)


def stack_check(stack_name: str, status: str | None) -> Check:
    """Whether `cdk deploy` can create or update a stack in `status` (None: it does not exist)."""
    name = f"stack {stack_name}"
    if status is None:
        return Check(name, Status.PASS, "does not exist yet: `npx cdk deploy` creates it")
    if status in UNUSABLE_STACK_STATES:
        return Check(name, Status.FAIL, f"is {status}: {UNUSABLE_STACK_STATES[status]}")
    if status.endswith("_IN_PROGRESS"):
        return Check(name, Status.FAIL, f"is {status}: wait until it finishes")
    return Check(name, Status.PASS, f"is {status}: `npx cdk deploy` updates it")


def upgrade_refusal_of(deployed_template: Mapping[str, Any], new: StateSettings | None) -> str | None:
    """Why deploying `new` over a stack deployed from `deployed_template` is not exact, or None.

    Over a stack deployed without the settings guard its first request is a Create, which the
    guard refuses in mode `crt` over stored state unless declared drained
    (`aggregation.setting_changes.first_guard_refusal`); preflight says so before the deploy,
    from the deployed template alone (`unguarded_upgrade_refusal`), so it cannot know whether
    the table holds state or the deploy will declare it drained.
    """
    resources = deployed_template.get("Resources", {}).values()
    if new is None or any(resource.get("Type") == STATE_SETTINGS_GUARD_TYPE for resource in resources):
        return None
    return unguarded_upgrade_refusal(new)


def check_stack(account: Account, stack_name: str, new: StateSettings | None = None) -> Check:
    cloudformation = account.client("cloudformation")
    try:
        stacks = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    except ClientError as error:
        if error_code(error) == "ValidationError":
            return stack_check(stack_name, None)
        raise
    check = stack_check(stack_name, str(stacks[0]["StackStatus"]))
    if check.status is not Status.PASS or new is None:
        return check
    try:
        body = cloudformation.get_template(StackName=stack_name)["TemplateBody"]
    except ClientError as error:
        return Check(
            check.name, Status.WARN, f"{check.detail}, but {unreadable(check.name, 'its template', error).detail}"
        )
    template = body if isinstance(body, dict) else json.loads(body)
    if (refusal := upgrade_refusal_of(template, new)) is not None:
        return Check(check.name, Status.FAIL, f"{refusal}; `npx cdk deploy` would not refuse it")
    return check


# ------------------------------------------------------------------------- the run


def guarded(name: str, what: str, check: Callable[[], Check]) -> Check:
    """Run one check; an AWS error it does not interpret itself makes it "unknown", never a crash."""
    try:
        return check()
    except (ClientError, BotoCoreError) as error:
        return unreadable(name, what, error)


def run_preflight(account: Account, plan: DeploymentPlan) -> list[Check]:
    """Every check, in the order a first deployment meets them."""
    credentials, account_id = check_credentials(account)
    if account_id is None:
        return [credentials]
    partition_check, partition = check_partition(account)
    checks = [credentials, partition_check]
    checks.append(guarded("CDK bootstrap", "the bootstrap stack", lambda: check_bootstrap(account, account_id)))
    checks.append(guarded("Powertools layer", "the layer", lambda: check_powertools_layer(account, partition, plan)))
    checks.append(check_concurrency(account, plan))
    checks.append(
        guarded(
            f"stack {plan.stack_name}", "the stack", lambda: check_stack(account, plan.stack_name, plan.state_settings)
        )
    )
    return checks
