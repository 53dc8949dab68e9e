"""``python -m local.conformance [--fresh] [--suite S ...]``: moto's own suites on plain and on patched moto.

1. Fetches moto's sdist at `MOTO_VERSION` into ``.local/conformance/`` with pip, which refuses
   any file but the one whose SHA-256 is `MOTO_SDIST_SHA256` (``--require-hashes``), and
   extracts its ``tests/`` (and ``pyproject.toml``, moto's pytest settings). The installed moto
   (the emulator's) must be that version. moto's own package is not extracted, so the tests
   import the installed one.
2. Runs `SUITES` twice, one run after the other: plain (moto as installed) and patched
   (`local.conformance.patched`: every patch of `local.emulator`); each writes its outcomes per
   test id (`local.conformance.record`). Plain moto's outcomes depend only on the sdist and the
   locked packages, so they are kept under a key of both and rerun only when one changes (or
   with ``--fresh``).
3. Compares per test id. A test that passes on plain moto and not on patched moto is a
   difference; each must be listed in docs/moto-upstream.md's table of differences (`DOCUMENT`,
   between `TABLE_START` and `TABLE_END`) with the AWS documentation sentence our behaviour
   follows and a test of ours asserting it. Fails on an unlisted difference, on a listed one
   that is not (any more) a difference, and on a listed test of ours that does not exist.

Exit status 0 when every difference is listed; the counts per suite are printed either way.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from toolkit.cli import exit_with

REPO_ROOT = Path(__file__).resolve().parents[2]
MOTO_VERSION = "5.2.5"
MOTO_SDIST_SHA256 = "391857257d5dac144334013c2c10e599def5f0562f553e979160140bd7bd9cf6"
"""SHA-256 of moto-5.2.5.tar.gz as PyPI publishes it."""
SUITES = ("test_dynamodb", "test_dynamodbstreams", "test_kinesis", "test_s3")
"""moto's test directories (``tests/<suite>``) for the services the pipeline uses."""
DOCUMENT = REPO_ROOT / "docs" / "moto-upstream.md"
TABLE_START = "<!-- conformance: differences -->"
TABLE_END = "<!-- /conformance: differences -->"
WORK_DIR = REPO_ROOT / ".local" / "conformance"
LOCKS = ("requirements.lock", "requirements-pip.lock")
"""What plain moto's outcomes depend on besides the sdist: the packages installed."""
RESULTS_FORMAT = 1
"""Bumped when `local.conformance.record` changes what it writes (cached plain outcomes are then stale)."""


class ConformanceError(Exception):
    """The run could not be made (download, hash, version): exit 2, with the reason."""


# ------------------------------------------------------------------ the sdist


def sdist_path(work_dir: Path = WORK_DIR) -> Path:
    return work_dir / f"moto-{MOTO_VERSION}.tar.gz"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        for block in iter(lambda: source.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_sdist(work_dir: Path = WORK_DIR) -> Path:
    """moto's sdist at `MOTO_VERSION`, downloaded once and checked against `MOTO_SDIST_SHA256`."""
    target = sdist_path(work_dir)
    if not target.exists():
        work_dir.mkdir(parents=True, exist_ok=True)
        requirement = work_dir / "moto-sdist.txt"
        requirement.write_text(f"moto=={MOTO_VERSION} --hash=sha256:{MOTO_SDIST_SHA256}\n")
        # --no-build-isolation: pip prepares the sdist's metadata with the locked setuptools
        # rather than one it would fetch unhashed.
        command = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet", "download"]
        command += ["--no-deps", "--no-binary", ":all:", "--no-build-isolation", "--require-hashes"]
        command += ["--requirement", str(requirement), "--dest", str(work_dir)]
        if subprocess.run(command, check=False).returncode != 0:
            raise ConformanceError(f"could not download moto {MOTO_VERSION}'s sdist (pip said why, above)")
    found = sha256_of(target)
    if found != MOTO_SDIST_SHA256:
        target.unlink()
        raise ConformanceError(f"{target.name} has SHA-256 {found}, not the pinned {MOTO_SDIST_SHA256}: removed")
    return target


def extract_tests(sdist: Path, work_dir: Path = WORK_DIR) -> Path:
    """The sdist's ``tests/`` and ``pyproject.toml`` under `work_dir` (not its ``moto/``): the tree to run."""
    root = work_dir / f"moto-{MOTO_VERSION}"
    marker = root / ".extracted"
    if marker.exists():
        return root
    prefix = f"moto-{MOTO_VERSION}/"
    with tarfile.open(sdist) as archive:
        members = [
            member
            for member in archive.getmembers()
            if member.name.startswith(prefix + "tests/") or member.name == prefix + "pyproject.toml"
        ]
        archive.extractall(work_dir, members=members, filter="data")
    marker.touch()
    return root


def check_installed_moto() -> None:
    installed = importlib.metadata.version("moto")
    if installed != MOTO_VERSION:
        raise ConformanceError(
            f"the installed moto is {installed}, the pinned sdist {MOTO_VERSION}: update MOTO_VERSION and "
            "MOTO_SDIST_SHA256 in local/conformance/__main__.py with the pin (make install first)"
        )


# ------------------------------------------------------------------- the runs


def plain_cache_key() -> str:
    digest = hashlib.sha256(f"{MOTO_SDIST_SHA256} {RESULTS_FORMAT} {sys.version} {SUITES}".encode())
    for lock in LOCKS:
        digest.update((REPO_ROOT / lock).read_bytes())
    return digest.hexdigest()[:16]


def _environment() -> dict[str, str]:
    """This process's environment without AWS or moto settings, with the fake credentials moto's tests
    expect (moto's docs, "Getting started": some tests make clients before ``mock_aws`` starts), our repo importable."""
    environment = {name: value for name, value in os.environ.items() if not name.startswith(("AWS_", "MOTO_"))}
    environment |= {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    environment["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [environment.get("PYTHONPATH")])])
    environment["PYTHONDONTWRITEBYTECODE"] = "1"
    return environment


def pytest_command(results: Path, patched: bool, suites: Sequence[str]) -> list[str]:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "local.conformance.record"]
    if patched:
        command += ["-p", "local.conformance.patched"]
    command += ["--conformance-results", str(results), "--continue-on-collection-errors", "--color=no", "--tb=short"]
    return command + [f"tests/{suite}" for suite in suites]


def run_suites(tree: Path, results: Path, patched: bool, suites: Sequence[str], log: Path) -> dict[str, str]:
    """Run `suites` in `tree` (plain or patched moto); the outcome per test id."""
    with log.open("w") as output:
        subprocess.run(
            pytest_command(results, patched, suites),
            cwd=tree,
            env=_environment(),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if not results.exists():
        raise ConformanceError(f"the {'patched' if patched else 'plain'} run wrote no results (see {log})")
    outcomes: dict[str, str] = json.loads(results.read_text())
    return outcomes


# ------------------------------------------------------------ the listed differences


@dataclass(frozen=True)
class ListedDifference:
    moto_test: str  # moto's test id, e.g. tests/test_s3/test_server.py::test_s3_server_post_cors
    aws_documents: str  # the AWS documentation sentence our behaviour follows
    our_test: str  # our test asserting it, e.g. tests/local/emulator/test_cross_origin.py::test_x


_CODE = re.compile(r"`([^`]+)`")


def listed_differences(document: Path = DOCUMENT) -> list[ListedDifference]:
    """The rows of the table between `TABLE_START` and `TABLE_END`: moto test | AWS sentence | our test."""
    text = document.read_text()
    if TABLE_START not in text or TABLE_END not in text:
        raise ConformanceError(f"{document.name} has no table of differences ({TABLE_START} ... {TABLE_END})")
    body = text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0]
    rows: list[ListedDifference] = []
    for line in body.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.strip().startswith("|") or len(cells) != 3 or set(cells[0]) <= set("-: "):
            continue
        moto_test, our_test = _CODE.search(cells[0]), _CODE.search(cells[2])
        if moto_test is None or our_test is None:
            continue  # the header row
        rows.append(ListedDifference(moto_test.group(1), cells[1], our_test.group(1)))
    return rows


def missing_test(test_id: str, root: Path = REPO_ROOT) -> str | None:
    """Why `test_id` (``path::[Class::]name[params]``) names no test of ours, or None when it does."""
    path, _, rest = test_id.partition("::")
    source = root / path
    if not path.startswith("tests/") or not source.is_file():
        return f"{path} is not a file under tests/"
    name = rest.split("::")[-1].split("[")[0]
    if not re.search(rf"^\s*def {re.escape(name)}\(", source.read_text(), re.MULTILINE):
        return f"{path} defines no test {name}"
    return None


# ------------------------------------------------------------------ comparison


@dataclass(frozen=True)
class Comparison:
    differences: list[str]  # passed on plain moto, not on patched moto
    unlisted: list[str]
    stale: list[str]  # listed, but not a difference
    broken_references: list[str]  # listed with a test of ours that does not exist
    uncollected: list[str]  # modules of moto's suites plain moto could not import (a missing dependency)


def suite_of(test_id: str) -> str:
    parts = test_id.split("/")
    return parts[1] if len(parts) > 2 else test_id


def compare(
    plain: Mapping[str, str], patched: Mapping[str, str], listed: Iterable[ListedDifference], root: Path = REPO_ROOT
) -> Comparison:
    differences = sorted(
        test for test, outcome in plain.items() if outcome == "passed" and patched.get(test) != "passed"
    )
    listed = list(listed)
    listed_ids = {row.moto_test for row in listed}
    broken = [f"{row.moto_test}: {why}" for row in listed if (why := missing_test(row.our_test, root)) is not None]
    broken += [f"{row.moto_test}: no AWS documentation sentence" for row in listed if len(row.aws_documents) < 20]
    return Comparison(
        differences=differences,
        unlisted=[test for test in differences if test not in listed_ids],
        stale=sorted(listed_ids - set(differences)),
        broken_references=broken,
        uncollected=sorted(test for test, outcome in plain.items() if "::" not in test and outcome == "failed"),
    )


def counts(outcomes: Mapping[str, str], suite: str) -> tuple[int, int]:
    """(passed, not passed: failed or skipped) among `suite`'s tests."""
    mine = [outcome for test, outcome in outcomes.items() if suite_of(test) == suite]
    passed = mine.count("passed")
    return passed, len(mine) - passed


def report(
    plain: Mapping[str, str], patched: Mapping[str, str], comparison: Comparison, suites: Sequence[str]
) -> list[str]:
    lines = [f"{'suite':<22}{'plain pass/other':>18}{'patched pass/other':>20}{'listed differences':>20}"]
    for suite in suites:
        plain_passed, plain_other = counts(plain, suite)
        patched_passed, patched_other = counts(patched, suite)
        listed = sum(
            1 for test in comparison.differences if suite_of(test) == suite and test not in comparison.unlisted
        )
        lines.append(
            f"{suite:<22}{f'{plain_passed}/{plain_other}':>18}{f'{patched_passed}/{patched_other}':>20}{listed:>20}"
        )
    for title, entries in (
        ("passes on plain moto, not on ours, and is not listed in docs/moto-upstream.md", comparison.unlisted),
        ("listed in docs/moto-upstream.md but not a difference", comparison.stale),
        ("listed with a reference that does not hold", comparison.broken_references),
        (
            "cannot be imported on plain moto (a test dependency missing from requirements-dev.txt?)",
            comparison.uncollected,
        ),
    ):
        lines += [f"{title}:", *(f"  {entry}" for entry in entries)] if entries else []
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m local.conformance", description=__doc__.splitlines()[0])
    parser.add_argument("--fresh", action="store_true", help="rerun plain moto even if its outcomes are kept")
    parser.add_argument("--suite", action="append", choices=SUITES, help="only this suite (repeatable)")
    arguments = parser.parse_args(argv)
    suites: tuple[str, ...] = tuple(arguments.suite or SUITES)
    try:
        check_installed_moto()
        tree = extract_tests(fetch_sdist())
        listed = listed_differences()
        plain_results = WORK_DIR / f"plain-{plain_cache_key()}-{'-'.join(suites)}.json"
        patched_results = WORK_DIR / "patched.json"
        patched_results.unlink(missing_ok=True)
        # One after the other: some of moto's tests serve on a fixed port (6789), so two runs at
        # once would answer each other's requests.
        if arguments.fresh or not plain_results.exists():
            plain_results.unlink(missing_ok=True)
            run_suites(tree, plain_results, False, suites, WORK_DIR / "plain.log")
        plain = json.loads(plain_results.read_text())
        patched = run_suites(tree, patched_results, True, suites, WORK_DIR / "patched.log")
    except ConformanceError as error:
        print(f"python -m local.conformance: {error}", file=sys.stderr)
        return 2
    if arguments.suite:
        listed = [row for row in listed if suite_of(row.moto_test) in suites]
    comparison = compare(plain, patched, listed)
    print("\n".join(report(plain, patched, comparison, suites)))
    failed = comparison.unlisted or comparison.stale or comparison.broken_references or comparison.uncollected
    print(f"logs: {WORK_DIR / 'plain.log'}, {WORK_DIR / 'patched.log'}")
    return 1 if failed else 0


if __name__ == "__main__":
    exit_with(main)
