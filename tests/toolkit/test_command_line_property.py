"""Issue 38, as a property over every operator command line: it does its job, or says what is wrong.

Hypothesis builds command lines for every command (`producer send|verify|clear`, `frontend`,
`audit reconcile|rebuild`, `local …`, `deploy preflight`, `benchmarks.capacity`,
`planner.load_test`) from each one's own argparse parser: every option it declares, with
non-finite, negative, zero, huge, empty, non-UTF-8 (as Python decodes such argv: lone surrogates)
and garbage values, files that are missing, directories, not UTF-8, not JSON or nested beyond
the parser, and unknown flags. Each command runs in-process through its `main(argv)`, with the
process's own stdout (UTF-8, strict) and stderr (UTF-8, backslashreplace), in an empty directory,
without AWS credentials or region and with any endpoint a closed local port, so nothing leaves
the machine. Every run must:

- never raise out of `main` (a traceback), other than argparse's SystemExit;
- exit 2 with exactly one line on stderr for misuse, or 1 for an operational failure or a state
  that is not the good one, said (the frontend's unreachable table, `local`'s failed run,
  `local status` of a runtime that is not running);
- never exit 0 with an error on stderr.

The `local` scenarios (`up`, `demo`, `chaos`, `soak`, `upgrade`, `synth`) would start processes:
their entry points are replaced by a stand-in that checks the settings it is handed (every number
finite) and returns 0, so the property covers their whole command line. Signals during start-up
are `tests/producer/test_producer_signals.py`'s (subprocesses).

Examples: `CLI_PROPERTY_EXAMPLES` (default 120, about a minute; `make chaos` runs 1,500).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import math
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.config import Config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import audit.cli
import audit.targets
import benchmarks.capacity
import deploy.cli
import frontend.cli
import frontend.target
import local.__main__ as local_cli
import planner.load_test
import producer.__main__ as producer_cli
import toolkit.pipeline
from local.deploy import lifecycle
from local.scenarios import chaos, demo, soak
from local.upgrade import scenario as upgrade_scenario

EXAMPLES = int(os.environ.get("CLI_PROPERTY_EXAMPLES", "120"))
CLOSED_PORT_ENDPOINT = "http://127.0.0.1:9"
"""The discard port: nothing listens, a connection is refused at once."""

Main = Callable[[list[str]], int]


@dataclasses.dataclass(frozen=True)
class Command:
    name: str
    main: Main
    prefix: tuple[str, ...]
    parser: argparse.ArgumentParser


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen: argparse.ArgumentParser = action.choices[name]
            return chosen
    raise AssertionError(f"no subcommand {name}")


def _commands() -> list[Command]:
    commands: list[Command] = []
    for module, main, subcommands in (
        ("producer", producer_cli.main, ("send", "verify", "clear")),
        ("audit", audit.cli.main, ("reconcile", "rebuild")),
        ("local", local_cli.main, ("up", "down", "status", "synth", "demo", "chaos", "soak", "upgrade")),
        ("deploy", deploy.cli.main, ("preflight",)),
    ):
        parser = {
            "producer": producer_cli.build_parser,
            "audit": audit.cli.build_parser,
            "local": local_cli.build_parser,
            "deploy": deploy.cli.build_parser,
        }[module]()
        commands += [Command(f"{module} {name}", main, (name,), _subparser(parser, name)) for name in subcommands]
    commands.append(Command("frontend", frontend.cli.main, (), frontend.cli.build_parser()))
    commands.append(Command("benchmarks.capacity", benchmarks.capacity.main, (), benchmarks.capacity.build_parser()))
    load_test = planner.load_test
    commands.append(Command("planner.load_test", load_test.main, (), _load_test_parser()))
    return commands


def _load_test_parser() -> argparse.ArgumentParser:
    """planner.load_test builds its parser inside main: the same two options, for the strategy."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float)
    parser.add_argument("--duration", type=float)
    return parser


HOSTILE_VALUES = [
    *("nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e300", "-1e300", "1e999", "1e-300"),
    *("-1", "0", "0.0", "-0", "0.5", "1", "2", "7", "10", "64", "65", "100", "101", "65535", "65536"),
    *("9" * 30, "9" * 5000, "1_000", " 3 ", "0x10", "1.5", "1e3"),
    *("", " ", "abc", "\udcff", "caf\udce9", "\x1b[2J", "a" * 3000),
    *("key=value", "=", "reduceParallelizationFactor=nan", "aggregateSlices=1e9", "stateTableCapacity={"),
    *("a,b", "5,5,3", "0,5", "Desk,Book", "Desk,Desk", "a:b", ",", "state,map", "nope"),
    *("--", "-c", "-1e5"),
]


def _files(root: Path) -> dict[str, Path]:
    """Every kind of file a --ledger, --outputs or --prices may name."""
    root.mkdir(parents=True, exist_ok=True)
    contents: dict[str, bytes] = {
        "not-utf8.json": b'{"aggregates": {"\xff\xfe": 1}}',
        "latin1.json": '{"endpoint_url": "caf\xe9"}'.encode("latin-1"),
        "garbage.json": b"{not json",
        "empty.json": b"",
        "list.json": b"[]",
        "deep.json": b"[" * 100_000,
        "nan.json": b'{"aggregates": {"A": {"Value": NaN, "TradeCount": 1}}}',
        "ledger.json": b'{"aggregates": {"R:D": {"Value": "1.5", "TradeCount": 1}}}',
        "outputs-no-tables.json": b'{"endpoint_url": "' + CLOSED_PORT_ENDPOINT.encode() + b'"}',
        "outputs.json": (
            b'{"endpoint_url": "' + CLOSED_PORT_ENDPOINT.encode() + b'", "stream_name": "S", "state_table": "T", '
            b'"aggregate_table": "A", "archive_bucket": "B", "quarantine": "Q", "delta_table": "D"}'
        ),
    }
    paths = {name: root / name for name in contents}
    for name, data in contents.items():
        paths[name].write_bytes(data)
    paths["a directory"] = root
    paths["missing"] = root / "missing.json"
    paths["non-UTF-8 name"] = root / "\udcff.json"
    return paths


def _value(action: argparse.Action, files: dict[str, Path]) -> st.SearchStrategy[list[str]]:
    if action.nargs == 0:
        return st.just([])
    choices: list[str] = [str(choice) for choice in action.choices] if action.choices else []
    values = st.sampled_from([*choices, *HOSTILE_VALUES]) if choices else st.sampled_from(HOSTILE_VALUES)
    if action.type is Path or "ledger" in action.dest or "outputs" in action.dest or action.dest == "prices":
        values = st.sampled_from(sorted(str(path) for path in files.values())) | values
    numbers = st.one_of(
        st.integers(-(10**20), 10**20).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.floats(min_value=0, max_value=200).map(lambda number: f"{number:g}"),
    )
    return st.one_of(values, numbers, st.text(max_size=8)).map(lambda value: [value])


@st.composite
def command_lines(draw: st.DrawFn, commands: list[Command], files: dict[str, Path]) -> tuple[Command, list[str]]:
    command = draw(st.sampled_from(commands))
    options = [action for action in command.parser._actions if action.option_strings and action.dest != "help"]
    argv = list(command.prefix)
    for action in draw(st.lists(st.sampled_from(options), max_size=5)) if options else []:
        argv += [draw(st.sampled_from(action.option_strings)), *draw(_value(action, files))]
    if draw(st.integers(0, 9)) == 0:
        argv.insert(draw(st.integers(0, len(argv))), draw(st.sampled_from(["--frobnicate", "extra", "-x", "--"])))
    return command, argv


# ------------------------------------------------------------------------ running one


def _finite(value: Any, where: str) -> None:
    if isinstance(value, float):
        assert math.isfinite(value), f"{where} is {value}"
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            _finite(getattr(value, field.name), f"{where}.{field.name}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _finite(item, f"{where}[{index}]")


def _stand_in(*arguments: Any, **options: Any) -> int:
    """What `local`'s scenarios receive: every number finite (then "done", 0)."""
    _finite(list(arguments), "arguments")
    for name, value in options.items():
        _finite(value, name)
    return 0


@contextlib.contextmanager
def _isolated(workdir: Path) -> Iterator[None]:
    """No credentials, no region, no endpoint but a closed port, one attempt per request, in `workdir`."""
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.startswith("AWS_") or name in {"LOCAL_STATE_DIR"}:
                patch.delenv(name)
        patch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        patch.setenv("AWS_CONFIG_FILE", str(workdir / "no-config"))
        patch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(workdir / "no-credentials"))
        patch.setenv("LOCAL_STATE_DIR", str(workdir / "state"))
        patch.setenv("COLUMNS", "120")
        one_attempt = Config(retries={"mode": "standard", "total_max_attempts": 1}, connect_timeout=1, read_timeout=2)
        patch.setattr(audit.targets, "CLIENT_CONFIG", one_attempt)
        patch.setattr(frontend.target, "_CLIENT_CONFIG", one_attempt)
        original_config = toolkit.pipeline.client_config
        patch.setattr(
            toolkit.pipeline,
            "client_config",
            lambda region, **_options: original_config(region, sdk_retries=1, connect_timeout=1, read_timeout=2),
        )
        for module, name in (
            (lifecycle, "up"),
            (demo, "run_demo"),
            (chaos, "run_chaos"),
            (soak, "run_soak"),
            (upgrade_scenario, "run_upgrades"),
        ):
            patch.setattr(module, name, _stand_in)
        patch.setattr(local_cli, "synthesize", lambda: "cdk.out")
        patch.chdir(workdir)
        yield


@dataclasses.dataclass
class Outcome:
    status: int
    stdout: str
    stderr: str


def run(command: Command, argv: list[str]) -> Outcome:
    """`main(argv)` as the process would run it: its streams, its exit status."""
    stdout_bytes, stderr_bytes = io.BytesIO(), io.BytesIO()
    stdout = io.TextIOWrapper(stdout_bytes, encoding="utf-8", errors="strict", write_through=True)
    stderr = io.TextIOWrapper(stderr_bytes, encoding="utf-8", errors="backslashreplace", write_through=True)
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            status = command.main(argv)
        except SystemExit as exited:
            code = exited.code
            status = code if isinstance(code, int) else (0 if code is None else 1)
            if isinstance(code, str):
                sys.stderr.write(code + "\n")
    return Outcome(status, stdout_bytes.getvalue().decode(), stderr_bytes.getvalue().decode())


def check(command: Command, argv: list[str], outcome: Outcome) -> None:
    where = f"{command.name}: {argv!r} -> {outcome.status}\nstderr: {outcome.stderr!r}"
    assert "Traceback" not in outcome.stderr + outcome.stdout, where
    lines = outcome.stderr.splitlines()
    if outcome.status == 0:
        assert not any("error" in line.lower() for line in lines), where
        return
    if outcome.status == 2:
        assert len(lines) == 1, f"misuse not in one line: {where}"
    else:  # a failure, or a state that is not the good one (`local status`: not running), said on either stream
        assert outcome.status == 1, f"an exit status neither 0, 1 nor 2: {where}"
        assert (outcome.stderr + outcome.stdout).strip(), f"failed without a word: {where}"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _files(tmp_path_factory.mktemp("files"))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("work")


COMMANDS = _commands()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_command_line_does_its_job_or_says_what_is_wrong_in_one_line(
    data: st.DataObject, files: dict[str, Path], workdir: Path
) -> None:
    command, argv = data.draw(command_lines(COMMANDS, files))
    with _isolated(workdir):
        outcome = run(command, argv)
    check(command, argv, outcome)


# The cases of issue 38, each a command line the property must get right (and did not on main),
# with what its one line must name.
ISSUE_CASES = [
    ("producer send", ["send", "--duration", "nan"], "argument --duration"),
    ("producer send", ["send", "--rate", "nan"], "argument --rate"),
    ("producer send", ["send", "--processes", "1000", "--count", "10"], "argument --processes"),
    ("producer send", ["send", "--watch", "1e300"], "argument --watch"),
    ("producer verify", ["verify", "--timeout", "nan"], "argument --timeout"),
    ("producer verify", ["verify", "--settle", "inf"], "argument --settle"),
    ("producer clear", ["clear", "--timeout", "nan"], "argument --timeout"),
    ("benchmarks.capacity", ["--rate", "nan"], "argument --rate"),
    ("benchmarks.capacity", ["--rate", "inf"], "argument --rate"),
    ("planner.load_test", ["--rate", "inf", "--duration", "10"], "argument --rate"),
    ("planner.load_test", ["--rate", "10", "--duration", "nan"], "argument --duration"),
    ("planner.load_test", ["--rate", "1e300", "--duration", "1e300"], "argument --rate"),
    ("local demo", ["demo", "--drain-timeout", "-1"], "argument --drain-timeout"),
    ("local demo", ["demo", "--count", "-5"], "argument --count"),
    ("frontend", ["--interval", "nan"], "argument --interval"),
    ("audit reconcile", ["reconcile", "--outputs", "{outputs.json}", "--ledger", "{not-utf8.json}"], "not-utf8.json"),
    ("audit reconcile", ["reconcile", "--outputs", "{outputs.json}", "--ledger", "{latin1.json}"], "latin1.json"),
    ("producer verify", ["verify", "--outputs", "{latin1.json}"], "latin1.json is not UTF-8"),
]


@pytest.mark.parametrize(("name", "argv", "names"), ISSUE_CASES)
def test_the_cases_of_issue_38(name: str, argv: list[str], names: str, files: dict[str, Path], workdir: Path) -> None:
    (command,) = [command for command in COMMANDS if command.name == name]
    argv = [files[value[1:-1]].as_posix() if value.startswith("{") else value for value in argv]
    with _isolated(workdir):
        outcome = run(command, argv)
    check(command, argv, outcome)
    assert outcome.status == 2, outcome
    assert names in outcome.stderr, outcome.stderr
