"""docs/settings.md is generated from stacks/settings.py, and is never stale."""

from __future__ import annotations

from pathlib import Path

import pytest

from stacks import settings_reference
from stacks.settings import DEFAULT_CONTEXT, INTEGER_RANGES, SETTING_MEANINGS


def test_the_page_is_up_to_date() -> None:
    page = settings_reference.PAGE
    assert page.read_text(encoding="utf-8") == settings_reference.render(), (
        "docs/settings.md is stale: run `python -m stacks.settings_reference --write` (or `make settings-reference`)"
    )


def test_every_setting_has_a_meaning_and_a_row() -> None:
    assert set(SETTING_MEANINGS) == set(DEFAULT_CONTEXT)
    page = settings_reference.render()
    for key in DEFAULT_CONTEXT:
        assert f"| `{key}` |" in page


def _row(key: str) -> str:
    return next(line for line in settings_reference.render().splitlines() if line.startswith(f"| `{key}` |"))


def test_ranges_defaults_and_auto_come_from_the_code() -> None:
    low, high = INTEGER_RANGES["stateBatchSize"]
    assert f"{low:,} to {high:,}" in _row("stateBatchSize")
    assert "`auto`: 2 at 400 msg/s" in _row("stateParallelizationFactor")
    assert "`crt+marker` or `crt`" in _row("reduceIdempotency")


@pytest.mark.parametrize(
    ("key", "rule"),
    [
        ("hierarchyLevels", "changes freely"),
        ("valueIntegerDigits", "may only rise (**a lower value is refused**)"),
        ("valueFractionDigits", "may only rise (**a lower value is refused**)"),
        ("markerTtlDays", "changes freely"),
        ("reduceIdempotency", "**refused**: a new stack"),
        ("aggregateSlices", "`crt+marker`: changes freely; `crt`: **refused**: a new stack"),
        ("reduceBatchSize", "`crt+marker`: changes freely; `crt`: **refused**: a new stack"),
        ("reduceParallelizationFactor", "`crt+marker`: changes freely; `crt`: **refused**: a new stack"),
    ],
)
def test_the_guard_column_is_the_guards_own_answer(key: str, rule: str) -> None:
    assert f"| {rule} |" in _row(key)


def test_check_fails_on_a_stale_page_and_write_fixes_it(tmp_path: Path) -> None:
    page = tmp_path / "settings.md"
    page.write_text("stale\n", encoding="utf-8")
    said: list[str] = []
    assert settings_reference.main(["--check"], page=page, out=said.append) == 1
    assert "stale" in said[0]
    assert settings_reference.main(["--write"], page=page, out=said.append) == 0
    assert settings_reference.main(["--check"], page=page, out=said.append) == 0
