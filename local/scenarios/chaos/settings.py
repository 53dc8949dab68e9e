"""What one `make chaos` does: its settings, the function faults and the emulator's fault rules."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from function_support.faults import first_invocations_variable
from local.emulator.injected_faults import CANCELLED_TOKEN_KEPT, LOST_RESPONSE, STATEMENTS, THROTTLE
from local.runner.redelivery import RedeliveryPolicy
from producer.sender import SendOptions

STAGES = ("state", "map", "reduce", "archive")
ORIGINAL_FUNCTION_FAULT_PCT: Mapping[str, float] = {"state": 1.0, "map": 2.0, "reduce": 2.0, "archive": 2.0}
"""The original design's demo rates; `make demo` uses them."""
DEFAULT_FAULT_MULTIPLIER = 4.0
DEFAULT_MESSAGE_COUNT = 20_000
DEFAULT_LOST_RESPONSE_PCT = 2.0
"""Per write request at each site. Each one costs an SDK retry, the reduce one a held
connection of 11 s (its variant is `timeout`): measured to keep the default run in budget."""
DEFAULT_THROTTLE_PCT = 2.0
DEFAULT_RUNNER_KILLS = 2
DEFAULT_WORKER_KILLS = 4
DEFAULT_DRAIN_TIMEOUT_SECONDS = 600.0
DEFAULT_STREAM_SHARDS = 8
DEFAULT_REDUCE_SLICES = 2
DEFAULT_AGAIN_AFTER_SUCCESS_PCT = 2.0
"""Per successful batch, in every function: delivered once more before its checkpoint moves."""
WRITE_SITES: tuple[tuple[str, str, str, str], ...] = (
    ("state", "BatchExecuteStatement", "state_table", "error"),
    ("map", "PutItem", "delta_table", "close"),
    ("reduce", "TransactWriteItems", "aggregate_table", "timeout"),
)
"""(stage, DynamoDB operation, outputs key of its table, lost-response variant)."""
S3_WRITE_SITES: tuple[tuple[str, str, str, str], ...] = (("archive", "PutObject", "archive_bucket", "close"),)
"""(stage, S3 operation, outputs key of its bucket, lost-response variant)."""
ARCHIVE_LOST_RESPONSE_MULTIPLIER = 10
ARCHIVE_LOST_RESPONSE_MAX_PCT = 25.0
"""The archive's PutObject responses are lost this many times as often as the other sites' writes,
at most this percentage: an archive invocation sends two requests whatever it holds (a batch
object and its receipt), about a hundred times fewer than the other sites send for the same
messages, so at their rate its resend path (the SDK's resend answered 412, taken as success)
would seldom fire in a run."""


def archive_lost_response_pct(lost_response_pct: float) -> float:
    """The lost-response percentage of the archive's PutObject (`ARCHIVE_LOST_RESPONSE_MULTIPLIER`)."""
    return min(ARCHIVE_LOST_RESPONSE_MAX_PCT, lost_response_pct * ARCHIVE_LOST_RESPONSE_MULTIPLIER)


class ChaosError(RuntimeError):
    """The chaos run could not be carried out (not: it found a mismatch, which is exit code 1)."""


@dataclass(frozen=True)
class ChaosSettings:
    """What one `make chaos` does; every field is a command-line option."""

    count: int = DEFAULT_MESSAGE_COUNT
    seed: int = 7
    fault_multiplier: float = DEFAULT_FAULT_MULTIPLIER
    """Function faults = the original rates times this, before and after the write."""
    lost_response_pct: float = DEFAULT_LOST_RESPONSE_PCT
    throttle_pct: float = DEFAULT_THROTTLE_PCT
    runner_kills: int = DEFAULT_RUNNER_KILLS
    worker_kills: int = DEFAULT_WORKER_KILLS
    duplicates_pct: float = 10.0
    out_of_order_pct: float = 10.0
    modifications_pct: float = 20.0
    malformed_pct: float = 2.0
    conflicting_pct: float = 1.0
    oversized_records: int = 3
    reshaped_retries: tuple[str, ...] = ("map", "reduce", "archive")
    """Stages whose failed batches the runner re-delivers in other boundaries (the map's also out of
    order: its mapping has a tumbling window, `local.runner.redelivery`)."""
    again_after_success_pct: float = DEFAULT_AGAIN_AFTER_SUCCESS_PCT
    """Successful batches of every stage delivered again (at least once), in percent."""
    kept_tokens: bool = True
    """The emulator keeps the tokens of cancelled reduce transactions taken."""
    control: bool = True
    control_count: int | None = None
    """Messages of the control run (default: `count`, the same run)."""
    drain_timeout_seconds: float = DEFAULT_DRAIN_TIMEOUT_SECONDS
    stream_shards: int = DEFAULT_STREAM_SHARDS
    """Shards of each DynamoDB stream: map and reduce invocations run side by side."""
    reduce_slices: int = DEFAULT_REDUCE_SLICES
    """Fewer slices than shards: concurrent reducers contend for the same items, and conflict."""
    aggregate: bool = False
    """The producer sends KPL aggregates (`send --aggregate`)."""
    hostile_aggregates_pct: float = 0.0
    """With `aggregate`: the share of aggregates the producer builds as an attacker would."""
    processes: int = 1
    """The producer's sending processes (`send --processes`), one merged ledger."""

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ChaosError("--count must be at least 1")
        if self.control_count is not None and self.control_count < 1:
            raise ChaosError("--control-count must be at least 1")
        if self.fault_multiplier < 0 or max(ORIGINAL_FUNCTION_FAULT_PCT.values()) * self.fault_multiplier > 50:
            raise ChaosError("--fault-multiplier must keep every function fault rate between 0 and 50 %")
        if not 0 <= self.again_after_success_pct <= 50:
            raise ChaosError("--again-after-success-pct must be between 0 and 50")
        for name, pct in (("--lost-response-pct", self.lost_response_pct), ("--throttle-pct", self.throttle_pct)):
            if not 0 <= pct <= 50:
                raise ChaosError(f"{name} must be between 0 and 50")
        if self.runner_kills < 0 or self.worker_kills < 0:
            raise ChaosError("--runner-kills and --worker-kills cannot be negative")
        if self.drain_timeout_seconds <= 0:
            raise ChaosError("--drain-timeout must be positive")
        if self.processes < 1:
            raise ChaosError("--processes must be at least 1")
        if not 1 <= self.stream_shards <= 64 or self.reduce_slices < 1:
            raise ChaosError("--stream-shards must be from 1 to 64 and --reduce-slices at least 1")
        if unknown := set(self.reshaped_retries) - set(STAGES):
            raise ChaosError(
                f"--reshaped-retries names no stage {', '.join(sorted(unknown))} (stages: {', '.join(STAGES)})"
            )
        try:
            self.send_options(self.count).generator_config(self.seed)
        except ValueError as error:
            raise ChaosError(str(error)) from None

    def function_fault_pct(self, stage: str) -> float:
        return ORIGINAL_FUNCTION_FAULT_PCT[stage] * self.fault_multiplier

    def function_fault_environment(self) -> dict[str, str]:
        """The `FAILURE_*_PCT` of docs/design.md for every stage, before and after the write."""
        environment: dict[str, str] = {}
        for stage in STAGES:
            pct = f"{self.function_fault_pct(stage):g}"
            environment[f"FAILURE_{stage.upper()}_LAMBDA_PCT"] = pct
            environment[f"FAILURE_{stage.upper()}_LAMBDA_AFTER_WRITE_PCT"] = pct
        return environment

    def concurrency_environment(self) -> dict[str, str]:
        """Several stream shards (`EMULATOR_STREAM_SHARDS`) and reduce's slices (`AGGREGATE_SLICES`)."""
        return {"EMULATOR_STREAM_SHARDS": str(self.stream_shards), "AGGREGATE_SLICES": str(self.reduce_slices)}

    def control_environment(self) -> dict[str, str]:
        """The negative control's reduce fails after its first commit in every execution environment.

        Random faults alone made the control flaky: a small run could see no reduce invocation
        fail after its writes, and then even `unsafe-add` comes out exact. With this, the first
        invocation's retry re-applies what it committed, so the unsafe mode must double count.
        """
        return {first_invocations_variable("reduce"): "1"}

    def runner_environment(self) -> dict[str, str]:
        """The runner's redelivery policy (`local.runner.redelivery`): `reshaped_retries`, and
        `again_after_success_pct` for every stage."""
        if not self.reshaped_retries and not self.again_after_success_pct:
            return {}
        policy = RedeliveryPolicy(frozenset(self.reshaped_retries), self.seed, self.again_after_success_pct)
        return policy.as_environment()

    def send_options(self, count: int, ledger: Any = None) -> SendOptions:
        return SendOptions(
            count=count,
            seed=self.seed,
            duplicates_pct=self.duplicates_pct,
            out_of_order_pct=self.out_of_order_pct,
            modifications_pct=self.modifications_pct,
            malformed_pct=self.malformed_pct,
            conflicting_pct=self.conflicting_pct,
            oversized_records=min(self.oversized_records, count // 2),
            ledger_path=ledger,
            aggregate=self.aggregate,
            hostile_aggregates_pct=self.hostile_aggregates_pct,
            processes=self.processes,
        )


def emulator_fault_config(settings: ChaosSettings, outputs: Mapping[str, str], seed: int) -> dict[str, Any]:
    """The `/_compat/faults` configuration: lost responses per write site and of the state function's
    batch statements one by one, then throttling (reduce transactions cancelled, the state function's
    batch statements refused one by one, then whole requests: each at `throttle_pct`), then kept tokens.
    Every rule faults its first request without a draw: a small run whose site sees a few dozen
    requests still exercises each fault at least once."""
    rules: list[dict[str, Any]] = []
    if settings.lost_response_pct:
        for _stage, operation, table_key, variant in WRITE_SITES:
            rules.append(
                {
                    "kind": LOST_RESPONSE,
                    "service": "dynamodb",
                    "percent": settings.lost_response_pct,
                    "operations": [operation],
                    "table": outputs[table_key],
                    "variant": variant,
                }
            )
        rules.append(  # the state function's BatchExecuteStatement: single statements applied, their answers lost
            {
                "kind": LOST_RESPONSE,
                "service": "dynamodb",
                "percent": settings.lost_response_pct,
                "variant": STATEMENTS,
                "table": outputs["state_table"],
            }
        )
        for _stage, operation, bucket_key, variant in S3_WRITE_SITES:
            rules.append(
                {
                    "kind": LOST_RESPONSE,
                    "service": "s3",
                    "percent": archive_lost_response_pct(settings.lost_response_pct),
                    "operations": [operation],
                    "table": f"{outputs[bucket_key]}/",
                    "variant": variant,
                }
            )
    if settings.throttle_pct:
        rules.append(  # reduce transactions cancelled by throttling, as DynamoDB reports it
            {
                "kind": THROTTLE,
                "service": "dynamodb",
                "percent": settings.throttle_pct,
                "operations": ["TransactWriteItems"],
                "table": outputs["aggregate_table"],
                "error": "TransactionCanceledException",
            }
        )
        for table in ("state_table", "quarantine"):  # the state function's statements: some refused, others applied
            rules.append(
                {
                    "kind": THROTTLE,
                    "service": "dynamodb",
                    "percent": settings.throttle_pct,
                    "variant": STATEMENTS,
                    "table": outputs[table],
                }
            )
        for service in ("dynamodb", "dynamodbstreams", "kinesis"):
            rules.append({"kind": THROTTLE, "service": service, "percent": settings.throttle_pct})
    if settings.kept_tokens:
        rules.append(
            {"kind": CANCELLED_TOKEN_KEPT, "service": "dynamodb", "percent": 100, "table": outputs["aggregate_table"]}
        )
    return {"seed": seed, "rules": [rule | {"min_injections": 1} for rule in rules]}
