"""What to run: event source mappings and functions, as the emulated Lambda service reports them.

The deployed stack is the source of truth. Each setting is read from the emulated Lambda
API first (`list_event_source_mappings`, `get_function_configuration`, `get_function`);
where moto leaves a field out, it comes from the same resource's properties in the
synthesized template (matched through the stack's logical -> physical ids); where both
are silent, Lambda's documented default applies. `MappingConfig.field_sources` records,
per field, which of the three it came from, and the runner logs it at start-up.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import re
import shutil
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local.deploy.deployer import EMULATOR_ACCOUNT, PUBLIC_PARAMETER_STAND_INS, Deployment, aws_client
from local.runner.filters import check_patterns

log = logging.getLogger(__name__)

MAPPING_FIELD_DEFAULTS: Mapping[str, Any] = {
    "BatchSize": 100,
    "MaximumBatchingWindowInSeconds": 0,
    "StartingPosition": "TRIM_HORIZON",
    "MaximumRetryAttempts": -1,
    "BisectBatchOnFunctionError": False,
    "FunctionResponseTypes": [],
    "FilterCriteria": None,
    "ParallelizationFactor": 1,
    "MaximumRecordAgeInSeconds": -1,
    "TumblingWindowInSeconds": 0,
    "DestinationConfig": None,
    "Enabled": True,
}
"""Lambda's defaults for stream event source mappings (AWS::Lambda::EventSourceMapping docs)."""


@dataclass(frozen=True)
class MappingConfig:
    """One stream event source mapping, every field the runner honours resolved."""

    uuid: str
    function_name: str
    event_source_arn: str
    batch_size: int
    maximum_batching_window_seconds: float
    starting_position: str
    maximum_retry_attempts: int
    bisect_batch_on_function_error: bool
    report_batch_item_failures: bool
    filter_patterns: tuple[dict[str, Any], ...]
    parallelization_factor: int
    tumbling_window_seconds: int
    enabled: bool
    field_sources: Mapping[str, str] = field(default_factory=dict)
    maximum_record_age_seconds: int = -1
    """MaximumRecordAgeInSeconds: records older than this are discarded unsent (-1: only when the
    stream's retention trims them; `local.runner.expiry`)."""
    on_failure_destination: str | None = None
    """DestinationConfig.OnFailure.Destination: the SQS queue, SNS topic or S3 bucket ARN that gets an
    invocation record for every discarded batch (`local.runner.expiry.OnFailureDestination`)."""
    function_arn: str = ""
    """The mapping's FunctionArn, as an invocation record names the function."""

    @property
    def source_kind(self) -> str:
        """`kinesis` or `dynamodb`, from the event source ARN."""
        return self.event_source_arn.split(":")[2]


@dataclass(frozen=True)
class FunctionConfig:
    """One function as deployed: what to import, with which environment and limits."""

    name: str
    arn: str
    handler: str
    environment: Mapping[str, str]
    timeout_seconds: int
    memory_mb: int
    reserved_concurrency: int | None
    code_sha256: str
    code_dir: Path
    layers: tuple[str, ...] = ()
    """The layer version ARNs (or names, read from the template) the function names, in order
    (`lambda_packages.import_directories`)."""
    runtime: str = ""
    """The function's `Runtime` (`python3.14`): its `AWS_EXECUTION_ENV`, and the version the local
    interpreter is compared with (`execution_environment.interpreter_note`)."""
    role_arn: str = ""
    """The execution role: the identity its workers' credentials are issued for."""


def _template_properties_by_physical_id(deployment: Deployment, resource_type: str) -> dict[str, Any]:
    resources = deployment.template.get("Resources", {})
    found: dict[str, Any] = {}
    for logical_id, deployed in deployment.resources.items():
        if deployed.resource_type == resource_type and logical_id in resources:
            found[deployed.physical_id] = resources[logical_id].get("Properties", {})
    return found


def _resolve_field(name: str, from_api: Mapping[str, Any], from_template: Mapping[str, Any]) -> tuple[Any, str]:
    if from_api.get(name) is not None:
        return from_api[name], "emulator"
    if from_template.get(name) is not None:
        return from_template[name], "template"
    return MAPPING_FIELD_DEFAULTS[name], "default"


def on_failure_destination_of(destination_config: Any) -> str | None:
    """The ARN `DestinationConfig` names for discarded batches, if any (`{"OnFailure": {"Destination": arn}}`).

    The emulator reports the deployed ARN; a template's value may still be an intrinsic function
    (`Fn::GetAtt`), which names no resource the runner can reach: refused in one line.
    """
    destination = ((destination_config or {}).get("OnFailure") or {}).get("Destination")
    if destination is None or destination == "":
        return None
    if not isinstance(destination, str) or not destination.startswith("arn:"):
        raise ValueError(f"DestinationConfig.OnFailure.Destination {destination!r} is not an ARN")
    return destination


def discover_mappings(deployment: Deployment) -> list[MappingConfig]:
    """Every stream event source mapping the deployed stack created, in a stable order."""
    lambda_client = aws_client("lambda", deployment.endpoint_url, deployment.region)
    template_by_uuid = _template_properties_by_physical_id(deployment, "AWS::Lambda::EventSourceMapping")
    mappings: list[MappingConfig] = []
    for page in lambda_client.get_paginator("list_event_source_mappings").paginate():
        for api in page["EventSourceMappings"]:
            arn = api["EventSourceArn"]
            if api["UUID"] not in template_by_uuid or arn.split(":")[2] not in ("kinesis", "dynamodb"):
                continue  # another stack's mapping, or not a stream
            template = template_by_uuid.get(api["UUID"], {})
            api_fields = dict(api)
            if "State" in api:
                api_fields["Enabled"] = api["State"] in ("Enabled", "Enabling", "Creating")
            sources: dict[str, str] = {}
            values: dict[str, Any] = {}
            for name in MAPPING_FIELD_DEFAULTS:
                values[name], sources[name] = _resolve_field(name, api_fields, template)
            filters = (values["FilterCriteria"] or {}).get("Filters", [])
            patterns = tuple(json.loads(f["Pattern"]) for f in filters)
            check_patterns(arn.split(":")[2], patterns)
            mappings.append(
                MappingConfig(
                    uuid=api["UUID"],
                    function_name=api["FunctionArn"].split(":")[6],
                    event_source_arn=arn,
                    batch_size=int(values["BatchSize"]),
                    maximum_batching_window_seconds=float(values["MaximumBatchingWindowInSeconds"]),
                    starting_position=str(values["StartingPosition"]),
                    maximum_retry_attempts=int(values["MaximumRetryAttempts"]),
                    bisect_batch_on_function_error=values["BisectBatchOnFunctionError"] in (True, "true"),
                    report_batch_item_failures="ReportBatchItemFailures" in values["FunctionResponseTypes"],
                    filter_patterns=patterns,
                    parallelization_factor=int(values["ParallelizationFactor"]),
                    tumbling_window_seconds=int(values["TumblingWindowInSeconds"]),
                    enabled=values["Enabled"] in (True, "true"),
                    field_sources=sources,
                    maximum_record_age_seconds=int(values["MaximumRecordAgeInSeconds"]),
                    on_failure_destination=on_failure_destination_of(values["DestinationConfig"]),
                    function_arn=str(api["FunctionArn"]),
                )
            )
    return sorted(mappings, key=lambda m: (m.function_name, m.event_source_arn))


def _code_location_in_template(deployment: Deployment, function_name: str) -> tuple[str, str]:
    """Bucket and key of the function's deployment package, from its template `Code` property."""
    for physical_id, properties in _template_properties_by_physical_id(deployment, "AWS::Lambda::Function").items():
        if physical_id != function_name:
            continue
        code = properties.get("Code", {})
        bucket = code.get("S3Bucket")
        if isinstance(bucket, dict) and "Fn::Sub" in bucket:
            bucket = (
                str(bucket["Fn::Sub"])
                .replace("${AWS::AccountId}", EMULATOR_ACCOUNT)
                .replace("${AWS::Region}", deployment.region)
            )
        key = code.get("S3Key")
        if isinstance(bucket, str) and isinstance(key, str):
            return bucket, key
    raise LookupError(f"function {function_name}: no S3 code location in the template")


LAYER_NAME_IN_ARN = re.compile(r":layer:([A-Za-z0-9_-]+):")


def layer_names(
    function_properties: Mapping[str, Any], template_parameters: Mapping[str, Any], region: str
) -> tuple[str, ...]:
    """The layers a function's template names, by name: moto answers `Layers: []` for a layer of
    another account (the Powertools publisher's), and the template builds the ARN with intrinsic
    functions (the version from an SSM parameter), of which only the name matters locally. A layer
    given whole by a public SSM parameter (`{"Ref": ...}`, as earlier releases name Powertools) is
    the value the deployer stands in for that parameter (`PUBLIC_PARAMETER_STAND_INS`)."""
    names = []
    for named in function_properties.get("Layers") or []:
        layer = named
        if isinstance(layer, Mapping) and set(layer) == {"Ref"}:
            parameter = str((template_parameters.get(layer["Ref"]) or {}).get("Default", ""))
            stand_in = next(
                (arn for prefix, arn in PUBLIC_PARAMETER_STAND_INS.items() if parameter.startswith(prefix)), None
            )
            layer = stand_in(region) if stand_in else layer
        names.extend(LAYER_NAME_IN_ARN.findall(json.dumps(layer)))
    return tuple(names)


def fetch_function(deployment: Deployment, function_name: str, functions_dir: Path) -> FunctionConfig:
    """The function's deployed configuration, and its deployed code extracted under `functions_dir`.

    moto's `get_function` returns a code URL that points at real S3, so the package is read
    from the emulator's S3 at the bucket and key the template's `Code` names, and checked
    against the `CodeSha256` the Lambda service reports: the code that runs is the code
    that was deployed, byte for byte.
    """
    lambda_client = aws_client("lambda", deployment.endpoint_url, deployment.region)
    s3 = aws_client("s3", deployment.endpoint_url, deployment.region)
    described = lambda_client.get_function(FunctionName=function_name)
    configuration = described["Configuration"]
    bucket, key = _code_location_in_template(deployment, function_name)
    package = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    sha256 = base64.b64encode(hashlib.sha256(package).digest()).decode()
    if configuration.get("CodeSha256") and configuration["CodeSha256"] != sha256:
        raise RuntimeError(f"function {function_name}: s3://{bucket}/{key} is not the deployed package")
    code_dir = functions_dir / function_name
    if code_dir.exists():
        shutil.rmtree(code_dir)
    code_dir.mkdir(parents=True)
    with zipfile.ZipFile(io.BytesIO(package)) as archive:
        archive.extractall(code_dir)
    template = _template_properties_by_physical_id(deployment, "AWS::Lambda::Function").get(function_name, {})
    reserved = (described.get("Concurrency") or {}).get("ReservedConcurrentExecutions")
    if reserved is None:
        reserved = template.get("ReservedConcurrentExecutions")
    return FunctionConfig(
        name=function_name,
        arn=configuration["FunctionArn"],
        handler=configuration["Handler"],
        environment=dict((configuration.get("Environment") or {}).get("Variables", {})),
        timeout_seconds=int(configuration.get("Timeout") or template.get("Timeout") or 3),
        memory_mb=int(configuration.get("MemorySize") or template.get("MemorySize") or 128),
        reserved_concurrency=int(reserved) if reserved is not None else None,
        code_sha256=sha256,
        code_dir=code_dir,
        layers=tuple(layer["Arn"] for layer in configuration.get("Layers") or [])
        or layer_names(template, deployment.template.get("Parameters", {}), deployment.region),
        runtime=str(configuration.get("Runtime") or template.get("Runtime") or ""),
        role_arn=str(configuration.get("Role") or ""),
    )
