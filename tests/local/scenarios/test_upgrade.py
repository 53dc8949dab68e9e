"""`python -m local upgrade`: a stack of an earlier release upgraded in place while messages flow, checked exactly.

The end-to-end run deploys the release before slices (b5dc996) from its own tree, leaves
batches its code committed unacknowledged, upgrades mid-stream and verifies; the same run
then shows the check failing for an upgrade made wrong on purpose (a reader of the new layout
that ignores the node items the old release wrote).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from aggregation.aggregate_items import node_path_of, sum_node_slices
from aggregation.deltas import NodeDelta
from local.__main__ import main
from local.deploy import lifecycle
from local.paths import LocalPaths
from local.upgrade import scenario
from local.upgrade.release_tree import incompatible_pins, pins
from local.upgrade.releases import RELEASES, UnknownRelease, find_release
from producer import verifier
from toolkit.pipeline import target_from_outputs


def test_a_release_is_found_by_name_or_commit_and_anything_else_is_refused() -> None:
    assert find_release("stop-17").commit == "b5dc996"
    assert find_release("b5dc9963dd5ae30ec5a433c11b72f33b27f9143b").name == "stop-17"
    assert find_release("CB98D6F").name == "stop-28"
    with pytest.raises(UnknownRelease, match="releases: stop-17 \\(b5dc996\\)"):
        find_release("b5dc")  # too short to be a commit of one
    assert all(release.why for release in RELEASES)


def test_the_cli_refuses_an_unknown_release_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["upgrade", "--from", "stop-99"]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "not a release: 'stop-99'" in error[0]


@given(st.integers(min_value=3, max_value=10**6))
def test_the_parts_add_up_to_the_count_and_none_is_empty(count: int) -> None:
    parts = scenario.part_counts(count)
    assert sum(parts) == count and min(parts) >= 1 and len(parts) == 3


def test_pins_are_compared_by_normalised_name_and_the_cdk_cli_too(tmp_path: Path) -> None:
    assert pins("aws_lambda_powertools==3.37.0\nmoto[server]==5.2.5  # x\n# c==1\n") == {
        "aws-lambda-powertools": "3.37.0",
        "moto": "5.2.5",
    }
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for tree, cdk_lib, cli in ((ours, "2.275.0", "2.1148.1"), (theirs, "2.200.0", "2.1000.0")):
        tree.mkdir()
        (tree / "constraints.txt").write_text(f"aws-cdk-lib=={cdk_lib}\nrich==15.0.0\n")
        (tree / "package.json").write_text(json.dumps({"devDependencies": {"aws-cdk": cli}}))
    assert incompatible_pins(theirs, ours) == [
        "aws-cdk-lib==2.200.0 (here 2.275.0)",
        "aws-cdk CLI 2.1000.0 (here 2.1148.1)",
    ]
    assert incompatible_pins(ours, ours) == []


def test_the_new_reducers_log_lines_are_counted() -> None:
    lines = [
        'INFO runner: not json {"service":"reduce"}',
        json.dumps(
            {"service": "reduce", "message": "token refused as reused with other parameters", "markers_found": 2}
        ),
        json.dumps({"service": "reduce", "message": "reduce batch done", "units_already_applied": 3}),
        json.dumps({"service": "map", "message": "reduce batch done", "units_already_applied": 7}),
    ]
    assert scenario.new_code_log_figures([line.replace(", ", ",").replace(": ", ":") for line in lines]) == (2, 3)


def sliced_layout_only(items: Iterable[tuple[str, Decimal, int]]) -> dict[str, NodeDelta]:
    """A reader made wrong on purpose: it knows only `node#<slice>#…`, skipping the layout before slices."""
    return sum_node_slices((key, value, count) for key, value, count in items if node_path_of(key) != key)


@pytest.mark.emulator
@pytest.mark.slow
def test_an_upgrade_from_the_release_before_slices_is_exact_and_a_reader_ignoring_its_items_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = LocalPaths(tmp_path / ".local")
    console = Console(file=open(os.devnull, "w"), width=200)  # noqa: SIM115
    settings = scenario.UpgradeSettings(release=find_release("b5dc996"), count=600, seed=5, keep_running=True)
    try:
        figures = scenario.run_upgrade(paths, console, settings)
        assert figures.old_template_sha256 != figures.new_template_sha256
        assert figures.stack_status == "UPDATE_COMPLETE"
        assert figures.old_unacknowledged_commits["reduce"] >= 1
        assert figures.new_units_already_applied >= 1, "the new reducer found units the old one applied: its markers"
        assert figures.pre_slice_node_items > 0 and figures.sliced_node_items > 0
        assert sum(figures.sent) == 600
        assert figures.exact and figures.reconcile_exit_code == 0 and figures.passed

        monkeypatch.setattr(verifier, "sum_node_slices", sliced_layout_only)
        wrong = verifier.verify_pipeline(target_from_outputs(paths.outputs), paths.ledger, timeout=5, settle_seconds=0)
        assert not wrong.exact and wrong.aggregates.mismatches
    finally:
        lifecycle.down(paths, report=lambda _: None)
