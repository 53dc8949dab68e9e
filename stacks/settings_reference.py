"""docs/settings.md: every `cdk.json` setting, generated from the code that validates it.

`python -m stacks.settings_reference --write` (or `make settings-reference`) rewrites the page;
`--check` exits 1 when it is stale, and a test does the same. Nothing in the page is written by
hand: each setting's meaning is `stacks.settings.SETTING_MEANINGS`, its default
`DEFAULT_CONTEXT`, its range `INTEGER_RANGES` or the validator's own constants, what `auto`
chooses is the planner's choice (`PipelineSettings.from_context`) at three declared rates, and
what the settings guard refuses over stored state is `aggregation.setting_changes.change_refusal`
asked about each change.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from aggregation.names import TOKEN_AND_MARKERS, TOKEN_ONLY
from aggregation.setting_changes import StateSettings, change_refusal
from aggregation.value_domain import ValueDomain
from planner.inputs import ARCHIVE_STORAGE_CLASSES, StreamCapacity, TableCapacity
from planner.load_profile import LOAD_PROFILES
from stacks import settings as settings_module
from stacks.settings import (
    _LOG_RETENTION_DAYS,
    _TABLE_CAPACITY_FIELDS,
    AUTO,
    CAPACITY_CHECKS,
    CAPACITY_MODES,
    DEFAULT_CONTEXT,
    DELETION_PROTECTION_AUTO,
    FAULT_INJECTION_VARIABLES,
    INFREQUENT_ACCESS_MIN_DAYS,
    INTEGER_RANGES,
    MAX_STREAM_SHARDS,
    MAX_TABLE_CAPACITY_UNITS,
    MAX_TRANSITION_DAYS,
    POWERTOOLS_LAYER_FROM_SSM,
    REDUCE_IDEMPOTENCY_MODES,
    REMOVAL_POLICIES,
    SETTING_MEANINGS,
    TARGET_UTILIZATION_RANGE,
    PipelineSettings,
)
from toolkit.cli import exit_with

PAGE: Final = Path(__file__).resolve().parents[1] / "docs" / "settings.md"
AUTO_RATES: Final[tuple[int, ...]] = (400, 50_000, 250_000)
"""The declared rates at which the page shows what `auto` chooses (the default first)."""

CAPACITY_LINK: Final = "deploy-and-operate.md#capacity-the-target-rate-and-on-demand-or-provisioned-tables"

_PLANNED: Final[Mapping[str, str]] = {
    "stateParallelizationFactor": "state_parallelization_factor",
    "reduceParallelizationFactor": "reduce_parallelization_factor",
    "aggregateSlices": "aggregate_slices",
    "archiveParallelizationFactor": "archive_parallelization_factor",
    "reduceMemoryMb": "reduce_memory_mb",
    "reduceBatchSize": "reduce_batch_size",
}
"""The `auto` settings (cdk.json key: `PipelineSettings` field)."""

_GUARDED: Final[Mapping[str, str]] = {
    "hierarchyLevels": "hierarchy_levels",
    "valueIntegerDigits": "value_domain.integer_digits",
    "valueFractionDigits": "value_domain.fraction_digits",
    "markerTtlDays": "marker_ttl_days",
    "reduceIdempotency": "reduce_idempotency",
    "aggregateSlices": "aggregate_slices",
    "reduceBatchSize": "reduce_batch_size",
    "reduceParallelizationFactor": "reduce_parallelization_factor",
}
"""The cdk.json keys the settings guard carries (`StateSettings`), each to its field."""


def _number(value: int) -> str:
    return f"{value:,}"


def _code(value: Any) -> str:
    return f"`{json.dumps(value, ensure_ascii=False)}`" if not isinstance(value, str) else f"`{value}`"


def _values(key: str) -> str:
    """What synthesis accepts for `key`, from the validator's constants."""
    if key in INTEGER_RANGES:
        low, high = INTEGER_RANGES[key]
        accepted = f"{_number(low)} to {_number(high)}"
        if key in _PLANNED:
            return f"`{AUTO}` or an integer {accepted}"
        if key == "powertoolsLayerVersion":
            return f"`{POWERTOOLS_LAYER_FROM_SSM}` or a layer version {accepted}"
        return accepted
    one_of: Mapping[str, Any] = {
        "reduceIdempotency": REDUCE_IDEMPOTENCY_MODES,
        "removalPolicy": tuple(REMOVAL_POLICIES),
        "capacityCheck": CAPACITY_CHECKS,
        "loadProfile": LOAD_PROFILES,
    }
    if key in one_of:
        return " or ".join(f"`{value}`" for value in one_of[key])
    if key == "logRetentionDays":
        return "one of " + ", ".join(_number(days) for days in _LOG_RETENTION_DAYS)
    if key.endswith("TableCapacity"):
        defaults = TableCapacity()
        figures = ", ".join(
            f"`{name}` ({getattr(defaults, attribute)}, "
            + (
                "{} to {}".format(*TARGET_UTILIZATION_RANGE)
                if name == "targetUtilizationPercent"
                else f"1 to {_number(MAX_TABLE_CAPACITY_UNITS)}"
            )
            + ")"
            for name, attribute in _TABLE_CAPACITY_FIELDS.items()
        )
        modes = " or ".join(f"`{mode}`" for mode in CAPACITY_MODES)
        return f"`{AUTO}`, or an object: `mode` {modes}; with `provisioned`: {figures}"
    shapes: Mapping[str, str] = {
        "stackName": "a letter, then up to 127 letters, digits and `-`",
        "hierarchyLevels": "a JSON list of level names, or `A,B,C` on the command line",
        "faultInjection": "an object keyed by "
        + ", ".join(f"`{name}`" for name in FAULT_INJECTION_VARIABLES)
        + ", each a percentage from 0 to 100",
        "streamMode": f'`{AUTO}`, `{{"mode": "on-demand"}}` or `{{"mode": "provisioned", "shardCount": N}}`, N from 1 '
        + f"to {_number(MAX_STREAM_SHARDS)}",
        "archiveLifecycle": '`{"storageClass": "STANDARD"}` or `{"storageClass": C, "afterDays": N}`, C one of '
        + ", ".join(f"`{name}`" for name in ARCHIVE_STORAGE_CLASSES[1:])
        + f", N from 1 to {_number(MAX_TRANSITION_DAYS)} ({INFREQUENT_ACCESS_MIN_DAYS} at least for `STANDARD_IA`)",
        "tableDeletionProtection": f"`{DELETION_PROTECTION_AUTO}`, `true` or `false`",
        "alarmEmail": 'an email address, or `""`',
        "breakGlassRoleArn": 'an IAM role ARN, or `""`',
        "keyAdminRoleArn": 'an IAM role ARN, or `""` (required with `customerManagedKey`)',
        "keyUserRoleArns": "a list of IAM role ARNs (only with `customerManagedKey`)",
    }
    if key in shapes:
        return shapes[key]
    if isinstance(DEFAULT_CONTEXT[key], bool):
        return "`true` or `false`"
    raise KeyError(f"the settings reference does not know what {key!r} accepts")


def _auto_choices() -> dict[str, str]:
    """What each `auto` setting becomes at each of `AUTO_RATES`, every other setting at its default."""
    chosen: dict[str, list[str]] = {key: [] for key in _PLANNED}
    for rate in AUTO_RATES:
        context = {**DEFAULT_CONTEXT, "targetMessagesPerSecond": rate}
        planned = PipelineSettings.from_context(context.get)
        for key, attribute in _PLANNED.items():
            chosen[key].append(f"{_number(getattr(planned, attribute))} at {_number(rate)} msg/s")
    return {key: "`auto`: " + ", ".join(values) for key, values in chosen.items()}


_CAPACITIES: Final[Mapping[str, str]] = {
    "stateTableCapacity": "state_table_capacity",
    "deltaTableCapacity": "delta_table_capacity",
    "aggregateTableCapacity": "aggregate_table_capacity",
    "streamMode": "stream_mode",
}
"""The capacity settings `loadProfile` decides when `auto` (cdk.json key: `PipelineSettings` field)."""


def _capacity(value: TableCapacity | StreamCapacity) -> str:
    """A capacity as the `auto` column shows it: `on-demand`, a stream's shards or a table's minimums."""
    if not value.provisioned:
        return "on-demand"
    if isinstance(value, StreamCapacity):
        return f"{_number(value.shard_count)} shard{'s' if value.shard_count > 1 else ''}"
    return f"{_number(value.min_write_capacity)} WCU / {_number(value.min_read_capacity)} RCU"


def _capacity_choices() -> dict[str, str]:
    """What each capacity setting left `auto` becomes: on-demand with the default `loadProfile`, and with
    `steady` the planner's choice at each of `AUTO_RATES`, every other setting at its default."""
    chosen: dict[str, list[str]] = {key: [] for key in _CAPACITIES}
    for rate in AUTO_RATES:
        context = {**DEFAULT_CONTEXT, "targetMessagesPerSecond": rate, "loadProfile": LOAD_PROFILES[1]}
        planned = PipelineSettings.from_context(context.get)
        for key, attribute in _CAPACITIES.items():
            chosen[key].append(f"{_capacity(getattr(planned, attribute))} at {_number(rate)} msg/s")
    return {
        key: f"`{AUTO}`: on-demand with `loadProfile` `{LOAD_PROFILES[0]}`; with `{LOAD_PROFILES[1]}`, the cheaper "
        f"mode at the declared rate (provisioned: its {'shards' if key == 'streamMode' else 'minimums'}): "
        + ", ".join(values)
        for key, values in chosen.items()
    }


def _with(state: StateSettings, field_path: str, value: Any) -> StateSettings:
    if field_path.startswith("value_domain."):
        name = field_path.split(".", 1)[1]
        domain = state.value_domain
        digits = {"integer_digits": domain.integer_digits, "fraction_digits": domain.fraction_digits, name: value}
        return replace(state, value_domain=ValueDomain(digits["integer_digits"], digits["fraction_digits"]))
    return replace(state, **{field_path: value})


def _get(state: StateSettings, field_path: str) -> Any:
    value: Any = state
    for part in field_path.split("."):
        value = getattr(value, part)
    return value


def _deployed(mode: str) -> StateSettings:
    """The state settings of a stack deployed with the defaults in `mode`."""
    context = {**DEFAULT_CONTEXT, "reduceIdempotency": mode}
    state = PipelineSettings.from_context(context.get).state_settings
    # Narrow the domain by one integer digit so that widening it stays within the 29 digits allowed.
    return replace(
        state, value_domain=ValueDomain(state.value_domain.integer_digits - 1, state.value_domain.fraction_digits)
    )


def _changes(key: str, current: Any) -> Mapping[str, Any]:
    """The changes the guard is asked about: direction -> new value."""
    if key == "hierarchyLevels":
        return {"change": tuple(reversed(current))}
    if key == "reduceIdempotency":
        return {"change": TOKEN_ONLY if current == TOKEN_AND_MARKERS else TOKEN_AND_MARKERS}
    low = INTEGER_RANGES[key][0]
    return {"raise": current + 1, **({"lower": current - 1} if current - 1 >= low else {})}


def _guard_rule(key: str) -> str:
    """What the settings guard does with a change of `key` over stored state, asked of `change_refusal`."""
    field_path = _GUARDED[key]
    refused: dict[str, set[str]] = {}
    for mode in REDUCE_IDEMPOTENCY_MODES:
        deployed = _deployed(mode)
        refused[mode] = {
            direction
            for direction, value in _changes(key, _get(deployed, field_path)).items()
            if change_refusal(deployed, _with(deployed, field_path, value)) is not None
        }
    directions = set(_changes(key, _get(_deployed(TOKEN_AND_MARKERS), field_path)))

    def phrase(refusals: set[str]) -> str:
        if not refusals:
            return "changes freely"
        if refusals >= directions:
            return "**refused**: a new stack"
        if refusals == {"lower"}:
            return "may only rise (**a lower value is refused**)"
        return "may only fall (**a higher value is refused**)"

    by_mode = {mode: phrase(refused[mode]) for mode in REDUCE_IDEMPOTENCY_MODES}
    if len(set(by_mode.values())) == 1:
        return by_mode[TOKEN_AND_MARKERS]
    return "; ".join(f"`{mode}`: {rule}" for mode, rule in by_mode.items())


def render() -> str:
    """The whole page."""
    unknown = set(DEFAULT_CONTEXT) ^ set(SETTING_MEANINGS)
    if unknown:
        raise KeyError(f"SETTING_MEANINGS and DEFAULT_CONTEXT differ: {sorted(unknown)}")
    auto = {**_auto_choices(), **_capacity_choices()}
    rows = [
        "| setting | default | values | `auto` | settings guard over stored state | meaning |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for key, default in DEFAULT_CONTEXT.items():
        shown_default = "all 0" if key == "faultInjection" else _code(default)
        auto_cell = auto.get(key, "")
        if key == "tableDeletionProtection":
            auto_cell = "`auto`: on when `removalPolicy` is `retain`"
        guard = _guard_rule(key) if key in _GUARDED else ""
        cells = [f"`{key}`", shown_default, _values(key), auto_cell, guard, SETTING_MEANINGS[key]]
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    removed = "\n".join(f"- `{key}`: {reason}." for key, reason in settings_module.REMOVED_SETTINGS.items())
    return f"""<!-- Generated by `python -m stacks.settings_reference --write` from stacks/settings.py: do not edit. -->

# Settings reference (`cdk.json` context)

Every setting the stack reads, with its default (`cdk.json` repeats them), the values synthesis
accepts (anything else stops it with one line naming the setting), what `auto` chooses and what the
settings guard does when a deploy changes the setting over a stack that already holds state.
Override any of them with `npx cdk deploy -c key=value`; the command line's strings are read as
their JSON values (`-c stateBatchSize=200`, `-c streamMode='{{"mode": "provisioned", "shardCount": 4}}'`).

**`auto`** settings are chosen at synthesis by the capacity planner for `targetMessagesPerSecond`,
the other settings as set ([Capacity]({CAPACITY_LINK}));
the column shows its choice at {", ".join(_number(rate) for rate in AUTO_RATES)} msg/s with every other
setting at its default. In mode `{TOKEN_ONLY}` the ones that form a reduce transaction
(`aggregateSlices`, `reduceParallelizationFactor`, `reduceBatchSize`) never follow the rate: `auto`
is then 1, 1 and 10.

**The settings guard** (`stacks/settings_guard.py`) compares the settings stored state depends on
with the deployed ones and fails a deploy whose change the state would not survive
(`aggregation/setting_changes.py` holds the rule and its proofs; [Known limits](known-limits.md)).
Its column is that rule's answer for a stack deployed with the defaults, asked about each change.
It also carries the code constants `NODE_GROUPS` and `MAX_NODES_PER_UNIT` (any change refused) and
`MAX_TRANSACTION_ACTIONS` (refused in mode `{TOKEN_ONLY}`).

{chr(10).join(rows)}

Settings of earlier releases are refused with what replaced them:

{removed}

Stack outputs and deployment: [Deploy and operate on AWS](deploy-and-operate.md).
"""


def main(argv: list[str] | None = None, *, page: Path = PAGE, out: Callable[[str], object] = print) -> int:
    parser = argparse.ArgumentParser(prog="python -m stacks.settings_reference", description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help=f"rewrite {PAGE.name}")
    action.add_argument("--check", action="store_true", help=f"exit 1 when {PAGE.name} is stale")
    arguments = parser.parse_args(argv)
    text = render()
    if arguments.write:
        page.write_text(text, encoding="utf-8")
        out(f"wrote {page}")
        return 0
    if arguments.check:
        if page.exists() and page.read_text(encoding="utf-8") == text:
            return 0
        out(f"{page} is stale: run `python -m stacks.settings_reference --write` (or `make settings-reference`)")
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    exit_with(main)
