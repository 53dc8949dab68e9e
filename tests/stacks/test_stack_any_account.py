"""What a first `cdk deploy` into any account depends on, asserted on the synthesized template.

1. No reservation: no function reserves concurrency (several reducers write their own slices of
   the totals), so an account of any concurrency quota takes the stack, and the setting that
   reserved one (`reduceReservedConcurrency`) is refused with what replaced it.
2. Powertools layer: always the publisher account's layer in the deployment's partition and
   region, never the deploying account's; only its version comes at deploy time from AWS's public
   SSM parameter for the pinned Powertools release, runtime and architecture (whatever value that
   parameter holds), or from `powertoolsLayerVersion`.
3. Stream filters: on the `dynamodb` key only, `exists` at a leaf, as Lambda documents them, and
   applied by the local runner the same way; handlers' skips are alarmed.
4. Partitions: no hard-coded partition; partitions without the public layer are refused at synth.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from aws_cdk.assertions import Template
from hypothesis import given
from hypothesis import strategies as st

from aggregation.names import NON_INSERT_RECORDS_SKIPPED
from local.deploy.deployer import LOCAL_POWERTOOLS_LAYER_NAME
from local.runner import events
from local.runner.filters import check_patterns, record_matches
from stacks import ExactlyOnceAggregationStack, SettingsError, build_app
from stacks.functions import (
    POWERTOOLS_LAYER_ACCOUNT,
    POWERTOOLS_VERSION,
    powertools_layer_arn_problem,
    powertools_layer_name,
    powertools_layer_parameter_name,
    require_supported_partitions,
)
from tests.stacks.stack_helpers import (
    ARCHIVE_HANDLER,
    HANDLERS,
    REDUCE_HANDLER,
    REPOSITORY_ROOT,
    event_source_mapping,
    function_properties,
    load_cdk_json_context,
    powertools_parameter_logical_id,
    resources_of_type,
    run_app_py,
    synthesize,
)

DOCUMENTED_PARAMETER = "/aws/service/powertools/python/arm64/python3.14/3.37.0"


@pytest.fixture(scope="module")
def small_account() -> tuple[ExactlyOnceAggregationStack, Template]:
    """`cdk deploy -c powertoolsLayerVersion=41`, as the CLI passes it."""
    return synthesize({"powertoolsLayerVersion": "41"})


# ---------------------------------------------------------------- 1. no reservation


def test_no_function_reserves_concurrency(template: Template) -> None:
    """Lambda refuses a reservation that leaves the account fewer than 100 unreserved executions,
    so any reservation would fail a deploy into an account whose quota is 10."""
    functions = resources_of_type(template, "AWS::Lambda::Function")
    assert len(functions) == len(HANDLERS) + 2  # the stages, the settings guard and its provider framework
    reserving = [
        name for name, function in functions.items() if "ReservedConcurrentExecutions" in function["Properties"]
    ]
    assert reserving == []


@pytest.mark.parametrize("value", ["0", "1"])
def test_the_removed_reservation_setting_is_refused_with_what_replaced_it(value: str) -> None:
    """`cdk deploy -c reduceReservedConcurrency=...` after an upgrade: one line, no traceback."""
    result = run_app_py({"CDK_CONTEXT_JSON": json.dumps({"reduceReservedConcurrency": value})})
    assert result.returncode == 1
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1
    (line,) = error_lines
    assert line.startswith("error: cdk.json context 'reduceReservedConcurrency' is gone: ")
    assert "several reducers" in line and "aggregateSlices" in line and "remove the setting" in line
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------- 2. Powertools layer


def test_the_pinned_powertools_is_the_one_the_layer_parameter_names() -> None:
    pins = {
        name: re.search(r"^aws[-_]lambda[-_]powertools==(\S+)$", (REPOSITORY_ROOT / name).read_text(), re.M)
        for name in ("requirements.txt", "constraints.txt")
    }
    assert {name: match.group(1) if match else None for name, match in pins.items()} == {
        "requirements.txt": POWERTOOLS_VERSION,
        "constraints.txt": POWERTOOLS_VERSION,
    }
    assert powertools_layer_parameter_name() == DOCUMENTED_PARAMETER


PUBLISHED_LAYER_NAME = "AWSLambdaPowertoolsPythonV3-python314-arm64"


def resolve_layer_arn(layer: Any, region: str, parameters: dict[str, str] | None = None) -> str:
    """A function's layer ARN as CloudFormation resolves it in `region` of the `aws` partition, for
    the intrinsics it uses: `Fn::Join` of text, `Ref`s and `Fn::Select` of `Fn::Split` of a `Ref`."""
    values = {"AWS::Partition": "aws", "AWS::Region": region, **(parameters or {})}

    def resolve(part: Any) -> str:
        if isinstance(part, str):
            return part
        if "Ref" in part:
            return values[part["Ref"]]
        index, split = part["Fn::Select"]
        delimiter, source = split["Fn::Split"]
        return resolve(source).split(delimiter)[int(index)]

    delimiter, parts = layer["Fn::Join"]
    return str(delimiter).join(resolve(part) for part in parts)


def test_every_function_takes_only_the_layer_version_from_the_public_parameter(template: Template) -> None:
    parameter_id = powertools_parameter_logical_id(template)
    template.has_parameter(
        parameter_id, {"Type": "AWS::SSM::Parameter::Value<String>", "Default": DOCUMENTED_PARAMETER}
    )
    published = f"arn:aws:lambda:eu-west-1:{POWERTOOLS_LAYER_ACCOUNT}:layer:{PUBLISHED_LAYER_NAME}:77"
    for handler in HANDLERS.values():
        properties = function_properties(template, handler)
        (layer,) = properties["Layers"]
        assert resolve_layer_arn(layer, "eu-west-1", {parameter_id: published}) == published, handler
        assert "AWS::AccountId" not in json.dumps(layer), "never the deploying account's layer"
        # The parameter names the runtime and architecture the functions run on.
        assert f"/{properties['Architectures'][0]}/{properties['Runtime']}/" in DOCUMENTED_PARAMETER


@given(
    account=st.from_regex(r"\A[0-9]{12}\Z"),
    region=st.sampled_from(["us-east-1", "eu-west-1", "ap-southeast-7"]),
    name=st.text(alphabet=st.characters(exclude_characters=":", exclude_categories=["Cs"]), min_size=1),
    version=st.integers(min_value=1, max_value=10**6),
)
def test_whatever_layer_the_parameter_names_the_functions_get_the_publishers(
    template: Template, account: str, region: str, name: str, version: int
) -> None:
    """A deployer passing `--parameters <layer parameter>=/their/own/parameter` holding their own
    layer's ARN gets the publisher's layer of that version: the template reads nothing else of it."""
    parameter_id = powertools_parameter_logical_id(template)
    value = f"arn:aws:lambda:{region}:{account}:layer:{name}:{version}"
    (layer,) = function_properties(template, REDUCE_HANDLER)["Layers"]
    resolved = resolve_layer_arn(layer, region, {parameter_id: value})
    assert resolved == f"arn:aws:lambda:{region}:{POWERTOOLS_LAYER_ACCOUNT}:layer:{PUBLISHED_LAYER_NAME}:{version}"
    assert powertools_layer_arn_problem(resolved, region) is None


def test_the_local_stand_in_layer_has_the_publishers_layer_name() -> None:
    """The emulator looks layers up by name and version only, so the deployer publishes its empty
    stand-in under the name the template names (it does not import the CDK app to ask)."""
    assert powertools_layer_name() == PUBLISHED_LAYER_NAME == LOCAL_POWERTOOLS_LAYER_NAME


def test_an_explicit_layer_version_overrides_the_parameter(
    small_account: tuple[ExactlyOnceAggregationStack, Template],
) -> None:
    _stack, template = small_account
    assert not [
        name
        for name, parameter in template.to_json().get("Parameters", {}).items()
        if "powertools" in str(parameter.get("Default", ""))
    ]
    for handler in HANDLERS.values():
        (layer,) = function_properties(template, handler)["Layers"]
        assert resolve_layer_arn(layer, "eu-west-1") == (
            f"arn:aws:lambda:eu-west-1:{POWERTOOLS_LAYER_ACCOUNT}:layer:{PUBLISHED_LAYER_NAME}:41"
        )


# ---------------------------------------------------------------- 3. stream filters


def delta_filter_patterns(template: Template, handler: str) -> list[dict[str, Any]]:
    mapping = event_source_mapping(template, handler)
    return [json.loads(f["Pattern"]) for f in mapping["FilterCriteria"]["Filters"]]


def delta_stream_record(event_name: str, images: tuple[str, ...]) -> dict[str, Any]:
    """A DeltaTable stream record as the local runner builds it from `get_records`."""
    keys = {"StreamShard": {"S": "label/shardId-1"}, "FirstSequenceNumber": {"S": "7".zfill(40)}}
    image = keys | {"RecordCount": {"N": "3"}}
    change: dict[str, Any] = {
        "Keys": keys,
        "SequenceNumber": "7",
        "StreamViewType": "NEW_IMAGE",
    }
    change |= {name: image for name in images}
    return events.dynamodb_record(
        {"eventID": "e", "eventName": event_name, "dynamodb": change},
        stream_arn="arn:aws:dynamodb:us-east-1:123456789012:table/Delta/stream/1",
        region="us-east-1",
    )


@pytest.mark.parametrize("handler", [REDUCE_HANDLER, ARCHIVE_HANDLER])
def test_delta_consumers_filter_on_the_documented_dynamodb_key_and_the_runner_agrees(
    template: Template, handler: str
) -> None:
    patterns = delta_filter_patterns(template, handler)
    assert patterns == [{"dynamodb": {"NewImage": {"StreamShard": {"S": [{"exists": True}]}}}}]
    check_patterns("dynamodb", patterns)  # what the runner refuses, such as `eventName`, is absent
    assert record_matches(delta_stream_record("INSERT", ("NewImage",)), patterns)
    assert not record_matches(delta_stream_record("REMOVE", ("OldImage",)), patterns), "TTL expiry"


@pytest.mark.parametrize("service", ["reduce", "archive"])
def test_records_the_handlers_skip_raise_an_alarm(template: Template, service: str) -> None:
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "Namespace": "ExactlyOnceAggregation/ExactlyOnceAggregation",
            "MetricName": NON_INSERT_RECORDS_SKIPPED,
            "Dimensions": [{"Name": "service", "Value": service}],
            "Statistic": "Sum",
            "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold",
        },
    )


# ---------------------------------------------------------------- 4. partitions


def test_the_app_targets_only_the_partition_the_layer_is_published_in() -> None:
    assert load_cdk_json_context()["@aws-cdk/core:target-partitions"] == ["aws"]


def test_no_function_arn_hard_codes_a_partition(
    template: Template, small_account: tuple[ExactlyOnceAggregationStack, Template]
) -> None:
    for synthesized in (template, small_account[1]):
        for handler in HANDLERS.values():
            assert "arn:aws:" not in json.dumps(function_properties(synthesized, handler)["Layers"])


@pytest.mark.parametrize(
    ("target_partitions", "region", "refused"),
    [
        (["aws"], None, None),
        (["aws"], "eu-west-1", None),
        (["aws"], "ap-southeast-7", None),
        (["aws"], "xx-nowhere-1", None),  # unknown to the CDK: left to deploy time
        ('["aws"]', None, None),  # as `-c` passes it
        (["aws", "aws-cn"], None, "must list only aws, got ['aws-cn']"),
        ("aws-us-gov", None, "must list only aws, got ['aws-us-gov']"),
        (["aws"], "cn-north-1", "region cn-north-1 is in partition aws-cn"),
        (["aws"], "us-gov-west-1", "region us-gov-west-1 is in partition aws-us-gov"),
    ],
)
def test_partitions_without_the_public_layer_are_refused_at_synth(
    target_partitions: Any, region: str | None, refused: str | None
) -> None:
    if refused is None:
        require_supported_partitions(target_partitions, region)
        return
    with pytest.raises(SettingsError, match=re.escape(refused)) as raised:
        require_supported_partitions(target_partitions, region)
    assert "\n" not in str(raised.value)


def test_build_app_applies_the_partition_check(monkeypatch: pytest.MonkeyPatch) -> None:
    context = {**load_cdk_json_context(), "@aws-cdk/core:target-partitions": ["aws", "aws-cn"]}
    with pytest.raises(SettingsError, match="published only there"):
        build_app(context)


def test_cdk_deploy_to_a_china_region_stops_at_synth_with_one_line() -> None:
    """What `cdk deploy` with a cn-north-1 profile shows: the CLI sets CDK_DEFAULT_REGION."""
    result = run_app_py({"CDK_DEFAULT_REGION": "cn-north-1"})
    assert result.returncode == 1
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1
    assert error_lines[0].startswith("error: region cn-north-1 is in partition aws-cn")
    assert "Traceback" not in result.stderr
