"""Which pipeline the producer, verifier and cleaner talk to (the lookup is `toolkit.pipeline`'s)."""

from __future__ import annotations

from pathlib import Path

from toolkit.pipeline import DEFAULT_OUTPUTS_PATH, PipelineTarget, TargetError, locate_pipeline

PRODUCER_NEEDS = ("stream_name", "state_table", "aggregate_table")


def resolve_target(
    stack_name: str | None = None,
    region: str | None = None,
    outputs_path: Path = DEFAULT_OUTPUTS_PATH,
) -> PipelineTarget:
    """The pipeline the user means (`toolkit.pipeline`'s order); TargetError when nothing names one."""
    target = locate_pipeline(stack_name, region, outputs_path, needs=PRODUCER_NEEDS)
    if target is None:
        raise TargetError(
            "no pipeline found: pass --stack-name NAME for a deployed stack, "
            f"or run `make up` (it writes {outputs_path})"
        )
    return target
