"""`python -m local.conformance` reads docs/moto-upstream.md's table and compares per test id (no moto run here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from local.conformance import __main__ as conformance

TABLE = f"""# Notes

{conformance.TABLE_START}
| moto's test | What AWS documents | Our test |
|---|---|---|
| `tests/test_dynamodb/test_x.py::test_a` | "must resolve to one primary key" | `tests/ours/test_y.py::test_b` |
{conformance.TABLE_END}
"""


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    (tmp_path / "tests" / "ours").mkdir(parents=True)
    (tmp_path / "tests" / "ours" / "test_y.py").write_text("def test_b() -> None:\n    pass\n")
    (tmp_path / "moto-upstream.md").write_text(TABLE)
    return tmp_path


def test_the_table_s_rows_are_read_and_its_header_is_not(repository: Path) -> None:
    assert conformance.listed_differences(repository / "moto-upstream.md") == [
        conformance.ListedDifference(
            "tests/test_dynamodb/test_x.py::test_a",
            '"must resolve to one primary key"',
            "tests/ours/test_y.py::test_b",
        )
    ]


def test_only_a_listed_difference_passes(repository: Path) -> None:
    listed = conformance.listed_differences(repository / "moto-upstream.md")
    plain = {"tests/test_dynamodb/test_x.py::test_a": "passed", "tests/test_s3/test_z.py::test_c": "passed"}

    listed_only = conformance.compare(
        plain, {**plain, "tests/test_dynamodb/test_x.py::test_a": "failed"}, listed, repository
    )
    unlisted = conformance.compare(plain, {"tests/test_dynamodb/test_x.py::test_a": "failed"}, listed, repository)
    stale = conformance.compare(plain, plain, listed, repository)

    assert (listed_only.unlisted, listed_only.stale, listed_only.broken_references) == ([], [], [])
    assert unlisted.unlisted == ["tests/test_s3/test_z.py::test_c"], "missing from the patched run: not passing"
    assert stale.stale == ["tests/test_dynamodb/test_x.py::test_a"], "listed, but passes on ours too"


def test_a_test_failing_on_plain_moto_too_is_no_difference(repository: Path) -> None:
    plain = {"tests/test_s3/test_z.py::test_c": "failed", "tests/test_s3/test_z.py::test_d": "skipped"}

    comparison = conformance.compare(plain, {}, [], repository)

    assert comparison.differences == []


def test_a_listed_test_of_ours_must_exist_and_a_module_plain_moto_cannot_import_fails(repository: Path) -> None:
    row = conformance.ListedDifference("tests/test_s3/test_z.py::test_c", "a documented sentence of AWS", "")
    missing = [
        conformance.ListedDifference(row.moto_test, row.aws_documents, "tests/ours/test_y.py::test_gone"),
        conformance.ListedDifference(row.moto_test, row.aws_documents, "tests/ours/test_none.py::test_b"),
    ]
    plain = {"tests/test_s3/test_z.py::test_c": "passed", "tests/test_s3/test_broken.py": "failed"}

    comparison = conformance.compare(plain, {}, missing, repository)

    assert len(comparison.broken_references) == 2
    assert comparison.uncollected == ["tests/test_s3/test_broken.py"]
