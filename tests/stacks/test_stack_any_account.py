"""What a first `cdk deploy` into any account depends on, asserted on the synthesized template.

1. No reservation: no function reserves concurrency (several reducers write their own slices of
   the totals), so an account of any concurrency quota takes the stack, and the setting that
   reserved one (`reduceReservedConcurrency`) is refused with what replaced it.
2. Powertools layer: its ARN comes at deploy time from AWS's public SSM parameter for the pinned
   Powertools release, runtime and architecture; `powertoolsLayerVersion` only overrides it.
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

from aggregation.names import NON_INSERT_RECORDS_SKIPPED
from local.runner import events
from local.runner.filters import check_patterns, record_matches
from stacks import ExactlyOnceAggregationStack, SettingsError, build_app
from stacks.functions import (
    POWERTOOLS_VERSION,
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


def test_every_function_takes_the_layer_arn_from_the_public_parameter_at_deploy_time(template: Template) -> None:
    parameter_id = powertools_parameter_logical_id(template)
    template.has_parameter(
        parameter_id, {"Type": "AWS::SSM::Parameter::Value<String>", "Default": DOCUMENTED_PARAMETER}
    )
    for handler in HANDLERS.values():
        properties = function_properties(template, handler)
        assert properties["Layers"] == [{"Ref": parameter_id}], handler
        # The parameter names the runtime and architecture the functions run on.
        assert f"/{properties['Architectures'][0]}/{properties['Runtime']}/" in DOCUMENTED_PARAMETER
    text = json.dumps(template.to_json())
    assert "017000801446" not in text, "no publisher account or layer version is hard-coded"
    assert "AWSLambdaPowertoolsPythonV3" not in text


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
        parts = layer["Fn::Join"][1]
        assert parts[0] == "arn:" and parts[1] == {"Ref": "AWS::Partition"}
        assert parts[-1].endswith(":017000801446:layer:AWSLambdaPowertoolsPythonV3-python314-arm64:41")


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
            "Namespace": "ExactlyOnceAggregation",
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
