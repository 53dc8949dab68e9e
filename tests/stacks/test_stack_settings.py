"""PipelineSettings: defaults in step with cdk.json, CLI-style strings accepted, bad values refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aggregation.aggregate_items import MAX_SLICES
from planner.inputs import ArchiveLifecycle, ServiceTimes, StreamCapacity
from planner.prices import load_price_table
from planner.scale_out import EVERY_SETTING_AUTO, settings_for_rate
from stacks import SettingsError, build_app
from stacks.functions import powertools_layer_arn_for_version
from stacks.settings import (
    DEFAULT_CONTEXT,
    FAULT_INJECTION_VARIABLES,
    PipelineSettings,
    declared_workload,
    planned_settings,
)
from tests.stacks.stack_helpers import REPOSITORY_ROOT, run_app_py


def settings_from(context: dict[str, Any]) -> PipelineSettings:
    return PipelineSettings.from_context(context.get)


def test_cdk_json_holds_every_setting_with_the_code_default(cdk_json_context: dict[str, Any]) -> None:
    settings_in_cdk_json = {key: value for key, value in cdk_json_context.items() if not key.startswith("@")}
    assert settings_in_cdk_json == dict(DEFAULT_CONTEXT)


def test_cdk_json_runs_the_app_with_python() -> None:
    assert json.loads((REPOSITORY_ROOT / "cdk.json").read_text())["app"] == "python3 app.py"


def test_defaults() -> None:
    settings = settings_from({})
    assert settings.stack_name == "ExactlyOnceAggregation"
    assert settings.hierarchy_levels == ("RiskType", "TradeDesk", "Region")
    assert (settings.state_batch_size, settings.map_batch_size, settings.reduce_batch_size) == (100, 100, 10)
    assert settings.state_parallelization_factor == 2, "auto: what the planner chooses for 400 msg/s"
    assert settings.state_write_concurrency == 16
    assert (settings.delta_ttl_days, settings.marker_ttl_days) == (7, 7)
    assert settings.reduce_idempotency == "crt+marker"
    assert settings.iterator_age_alarm_ms == 60000
    assert settings.removal_policy_name == "retain"
    assert dict(settings.fault_injection) == dict.fromkeys(FAULT_INJECTION_VARIABLES, 0.0)
    assert settings.stream_mode == StreamCapacity()
    assert settings.archive_lifecycle == ArchiveLifecycle()


def test_command_line_strings_are_accepted() -> None:
    """`cdk deploy -c key=value` hands every value over as a string."""
    settings = settings_from(
        {
            "stateBatchSize": "250",
            "hierarchyLevels": "Desk, Book",
            "removalPolicy": "DESTROY",
            "faultInjection": '{"FAILURE_MAP_LAMBDA_AFTER_WRITE_PCT": "12.5"}',
            "streamMode": '{"mode": "provisioned", "shardCount": "8"}',
            "archiveLifecycle": '{"storageClass": "DEEP_ARCHIVE", "afterDays": "180"}',
        }
    )
    assert settings.archive_lifecycle == ArchiveLifecycle("DEEP_ARCHIVE", 180)
    assert settings.stream_mode == StreamCapacity(mode="provisioned", shard_count=8)
    assert settings.state_batch_size == 250
    assert settings.hierarchy_levels == ("Desk", "Book")
    assert settings.removal_policy_name == "destroy"
    assert settings.fault_injection_environment("MAP") == {
        "FAILURE_MAP_LAMBDA_PCT": "0",
        "FAILURE_MAP_LAMBDA_AFTER_WRITE_PCT": "12.5",
    }


def test_fault_injection_environment_is_per_stage() -> None:
    settings = settings_from({"faultInjection": {"FAILURE_STATE_LAMBDA_PCT": 30, "FAILURE_REDUCE_LAMBDA_PCT": 100}})
    assert settings.fault_injection_environment("STATE") == {
        "FAILURE_STATE_LAMBDA_PCT": "30",
        "FAILURE_STATE_LAMBDA_AFTER_WRITE_PCT": "0",
    }
    assert settings.fault_injection_environment("REDUCE")["FAILURE_REDUCE_LAMBDA_PCT"] == "100"


def test_powertools_layer_comes_from_the_public_parameter_unless_a_version_is_named() -> None:
    assert settings_from({}).powertools_layer_version is None
    assert settings_from({"powertoolsLayerVersion": "ssm"}).powertools_layer_version is None
    assert settings_from({"powertoolsLayerVersion": "41"}).powertools_layer_version == 41
    arn = powertools_layer_arn_for_version(41)
    assert arn.endswith(":017000801446:layer:AWSLambdaPowertoolsPythonV3-python314-arm64:41")


def test_reduce_scales_out_over_slices_and_lanes() -> None:
    assert (settings_from({}).aggregate_slices, settings_from({}).reduce_parallelization_factor) == (1, 1)
    chosen = settings_from({"aggregateSlices": "10000", "reduceParallelizationFactor": "10"})
    assert (chosen.aggregate_slices, chosen.reduce_parallelization_factor) == (MAX_SLICES, 10)
    assert chosen.state_settings.aggregate_slices == MAX_SLICES


@pytest.mark.parametrize("value", [0, 1, "1", "0"])
def test_the_reservation_setting_of_earlier_releases_is_refused_whatever_its_value(value: Any) -> None:
    with pytest.raises(SettingsError) as raised:
        settings_from({"reduceReservedConcurrency": value})
    text = str(raised.value)
    assert text.startswith("cdk.json context 'reduceReservedConcurrency' is gone: reduce no longer reserves")
    assert "\n" not in text


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("stackName", "1-starts-with-digit", "'stackName' must be a CloudFormation stack name"),
        ("hierarchyLevels", [], "'hierarchyLevels' must be a non-empty list"),
        ("hierarchyLevels", ["RiskType", "Risk:Type"], "no ':'"),
        ("hierarchyLevels", ["Region", "Region"], "distinct"),
        ("stateBatchSize", 0, "'stateBatchSize' must be an integer from 1 to 10000, got 0"),
        ("stateBatchSize", True, "'stateBatchSize' must be an integer"),
        ("stateBatchSize", "ten", "'stateBatchSize' must be an integer"),
        ("stateParallelizationFactor", 11, "from 1 to 10"),
        ("mapBatchSize", 10001, "'mapBatchSize' must be an integer from 1 to 10000"),
        ("reduceBatchSize", -1, "'reduceBatchSize'"),
        ("deltaTtlDays", 1, "'deltaTtlDays' must be an integer from 2 to 365"),
        ("markerTtlDays", 0, "'markerTtlDays'"),
        ("reduceIdempotency", "exactly-once", "'reduceIdempotency' must be 'crt+marker' or 'crt'"),
        ("reduceIdempotency", "unsafe-add", "'reduceIdempotency' must be 'crt+marker' or 'crt'"),
        ("logRetentionDays", 10, "'logRetentionDays' must be one of 1, 3, 5, 7, 14"),
        ("powertoolsLayerVersion", 0, "'powertoolsLayerVersion' must be 'ssm' or a layer version from 1 to 100000"),
        ("powertoolsLayerVersion", "latest", "'powertoolsLayerVersion' must be 'ssm' or a layer version"),
        ("aggregateSlices", 0, "'aggregateSlices' must be 'auto' or an integer from 1 to 10000, got 0"),
        ("aggregateSlices", "10001", "'aggregateSlices' must be 'auto' or an integer from 1 to 10000"),
        ("aggregateSlices", "Auto", "'aggregateSlices' must be 'auto' or an integer from 1 to 10000, got 'Auto'"),
        ("reduceParallelizationFactor", 11, "'reduceParallelizationFactor' must be 'auto' or an integer from 1 to 10"),
        ("reduceParallelizationFactor", "0", "'reduceParallelizationFactor' must be 'auto' or an integer from 1 to 10"),
        ("removalPolicy", "snapshot", "'removalPolicy' must be 'retain' or 'destroy'"),
        ("faultInjection", [], "'faultInjection' must be an object keyed by FAILURE_STATE_LAMBDA_PCT"),
        ("faultInjection", {"FAILURE_STAT_LAMBDA_PCT": 5}, "keyed only by"),
        (
            "faultInjection",
            {"FAILURE_MAP_LAMBDA_PCT": 101},
            "'faultInjection.FAILURE_MAP_LAMBDA_PCT' must be a percentage",
        ),
        ("faultInjection", {"FAILURE_MAP_LAMBDA_PCT": -1}, "from 0 to 100"),
        ("faultInjection", {"FAILURE_MAP_LAMBDA_PCT": "NaN"}, "from 0 to 100"),
        ("streamMode", "provisioned", "'streamMode' must be 'auto', {\"mode\": \"on-demand\"} or"),
        ("streamMode", {"mode": "provisioned"}, '"shardCount": 1 to 10000}'),
        ("streamMode", {"mode": "on-demand", "shardCount": 4}, "an on-demand stream chooses its own shards"),
        ("streamMode", {"mode": "provisioned", "shardCount": 0}, "'streamMode.shardCount' must be an integer"),
        ("streamMode", {"mode": "provisioned", "shards": 4}, "'streamMode' must be"),
        ("archiveLifecycle", {"storageClass": "GLACIER_IR"}, 'with "afterDays" (1 to 36500) unless STANDARD'),
        ("archiveLifecycle", {"storageClass": "STANDARD", "afterDays": 30}, "STANDARD moves nothing"),
        ("archiveLifecycle", {"storageClass": "STANDARD_IA", "afterDays": 10}, "from 30 to 36500, got 10"),
        ("archiveLifecycle", {"storageClass": "ONEZONE_IA", "afterDays": 30}, "'archiveLifecycle' must be"),
        ("archiveLifecycle", {"storageClass": "GLACIER", "afterDays": 0}, "'archiveLifecycle.afterDays' must be"),
        ("alarmEmail", "oncall", "'alarmEmail' must be an email address or \"\""),
        ("alarmEmail", 5, "'alarmEmail' must be an email address"),
        ("quarantineTtlDays", 3, "'quarantineTtlDays' must be an integer from 7 to 3650, got 3"),
        ("tableDeletionProtection", "yes", "'tableDeletionProtection' must be 'auto', true or false"),
        ("breakGlassRoleArn", "arn:aws:iam::123456789012:user/alice", "'breakGlassRoleArn' must be an IAM role ARN"),
        ("archiveObjectLockDays", -1, "'archiveObjectLockDays' must be an integer from 0 to 36500"),
        ("archiveBatchingWindowSeconds", -1, "'archiveBatchingWindowSeconds' must be an integer from 0 to 300, got -1"),
        ("archiveBatchingWindowSeconds", 301, "'archiveBatchingWindowSeconds' must be an integer from 0 to 300"),
        ("archiveRegistryShards", 32, "'archiveRegistryShards' is gone: the archive no longer counts"),
        ("customerManagedKey", "yes", "'customerManagedKey' must be true or false"),
        ("customerManagedKey", True, "'customerManagedKey' true needs 'keyAdminRoleArn'"),
        ("keyAdminRoleArn", "arn:aws:iam::123456789012:role/Admin", "apply only with customerManagedKey true"),
        ("keyUserRoleArns", ["not-an-arn"], "'keyUserRoleArns' must be an IAM role ARN"),
        ("keyUserRoleArns", {"role": "x"}, "'keyUserRoleArns' must be a list of IAM role ARNs"),
    ],
)
def test_invalid_values_are_refused_with_a_one_line_error(key: str, value: Any, message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        settings_from({key: value})
    text = str(raised.value)
    assert message in text
    assert "\n" not in text
    assert text.startswith(f"cdk.json context '{key}")


def test_build_app_refuses_a_bad_context_value() -> None:
    with pytest.raises(SettingsError, match="'reduceIdempotency' must be 'crt\\+marker' or 'crt', got 'none'"):
        build_app({"reduceIdempotency": "none"})


def test_app_py_exits_with_a_one_line_error_on_a_bad_setting() -> None:
    """What a user sees from `cdk synth -c stateBatchSize=0`: one line, no traceback."""
    result = run_app_py({"CDK_CONTEXT_JSON": json.dumps({"stateBatchSize": 0})})
    assert result.returncode == 1
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert error_lines == ["error: cdk.json context 'stateBatchSize' must be an integer from 1 to 10000, got 0"]
    assert "Traceback" not in result.stderr


def test_security_settings_read_their_command_line_spellings() -> None:
    admin, producer, reader = (f"arn:aws:iam::123456789012:role/{name}" for name in ("Admin", "Producer", "Reader"))
    settings = settings_from(
        {
            "customerManagedKey": "true",
            "keyAdminRoleArn": admin,
            "keyUserRoleArns": f"{producer}, {reader}",
            "tableDeletionProtection": "false",
            "alarmEmail": "oncall@example.com",
            "archiveObjectLockDays": "90",
        }
    )
    assert (settings.customer_managed_key, settings.key_admin_role_arn) == (True, admin)
    assert settings.key_user_role_arns == (producer, reader)
    assert settings.table_deletion_protection is False
    assert (settings.alarm_email, settings.archive_object_lock_days) == ("oncall@example.com", 90)
    defaults = settings_from({})
    assert (defaults.alarm_email, defaults.break_glass_role_arn, defaults.key_admin_role_arn) == (None, None, None)
    assert (defaults.quarantine_ttl_days, defaults.table_deletion_protection) == (30, True)
    assert settings_from({"removalPolicy": "destroy"}).table_deletion_protection is False


@pytest.mark.parametrize("rate", [400, 5_000, 50_000, 250_000])
def test_auto_settings_are_the_planner_s_choice_for_the_declared_rate(rate: int) -> None:
    """`auto` (the default) is `planner.scale_out.settings_for_rate` at `targetMessagesPerSecond`; an
    integer given beside it is kept, and the others are chosen around it."""
    settings = settings_from({"targetMessagesPerSecond": rate})
    explicit = settings_from({"targetMessagesPerSecond": rate, "stateParallelizationFactor": "auto"})
    chosen = settings_for_rate(
        declared_workload(settings),
        planned_settings(settings),
        ServiceTimes(),
        load_price_table(),
        auto=EVERY_SETTING_AUTO,
    )
    picked = (
        settings.state_parallelization_factor,
        settings.reduce_parallelization_factor,
        settings.aggregate_slices,
        settings.reduce_memory_mb,
        settings.reduce_batch_size,
    )
    assert picked == (
        chosen.state_parallelization_factor,
        chosen.reduce_parallelization_factor,
        chosen.aggregate_slices,
        chosen.reduce_memory_mb,
        chosen.reduce_batch_size,
    )
    assert explicit == settings
    kept = settings_from({"targetMessagesPerSecond": rate, "aggregateSlices": 8})
    assert kept.aggregate_slices == 8 and kept.state_parallelization_factor == settings.state_parallelization_factor
    batch = settings_from({"targetMessagesPerSecond": rate, "reduceBatchSize": "25"})
    assert batch.reduce_batch_size == 25


def test_auto_reduce_batches_follow_the_rate_with_markers_and_stay_at_10_in_crt() -> None:
    """In `crt` a retried reduce batch is recognised by its token alone, which names its delta items:
    a deploy declaring another rate must not re-form the batches it leaves in flight."""
    assert settings_from({"targetMessagesPerSecond": 50000}).reduce_batch_size == 46  # one transaction a group
    crt = settings_from({"targetMessagesPerSecond": 50000, "reduceIdempotency": "crt"})
    assert crt.reduce_batch_size == 10
