"""The command line every operator tool shares: misuse is one line and exit status 2.

argparse's own error prints the whole usage block first; people start these tools by
hand and in CI logs, where one line saying what was wrong (and where help is) reads
better. Each tool keeps its own prefix (`producer: error: `, `error: `, ...) because
scripts and tests match on it.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from typing import Any, Final, NoReturn, TypeVar

from toolkit.untrusted import printable

EXIT_USAGE = 2
"""argparse's convention for wrong arguments, kept by every tool."""
EXIT_OUTPUT_CLOSED = 141
"""What a shell reports for a command killed by SIGPIPE (128 + 13): its reader went away."""

Number = TypeVar("Number", bound=float)


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse, but misuse is reported as ``<prefix><message> (see `<prog> --help`)``.

    ``error_prefix`` None: ``<prog>: error: ``. The subcommand parsers of
    :meth:`add_subparsers` are of this class and share the prefix; their ``prog``
    names the subcommand, whose ``--help`` explains the options.
    """

    def __init__(self, *args: Any, error_prefix: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.error_prefix = f"{self.prog}: error: " if error_prefix is None else error_prefix
        self.register("action", "parsers", _OneLineCommands)

    def add_subparsers(self, **kwargs: Any) -> Any:
        kwargs.setdefault("parser_class", OneLineArgumentParser)
        kwargs["error_prefix"] = self.error_prefix  # for _OneLineCommands
        return super().add_subparsers(**kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.error_prefix}{message} (see `{self.prog} --help`)\n")


class _OneLineCommands(argparse._SubParsersAction):  # type: ignore[type-arg]  # not generic at run time
    """The subcommands of a :class:`OneLineArgumentParser`, which hand down its error prefix."""

    def __init__(self, *args: Any, error_prefix: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._error_prefix = error_prefix

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if issubclass(self._parser_class, OneLineArgumentParser):
            kwargs.setdefault("error_prefix", self._error_prefix)
        parser: argparse.ArgumentParser = super().add_parser(name, **kwargs)
        return parser


MAX_SECONDS: Final = 366 * 24 * 3600
"""The longest duration, timeout or wait any command accepts: a year (clocks, ``Event.wait`` and
``time.sleep`` overflow long before 1e300)."""
MAX_COUNT: Final = 10**12
"""The most of anything countable (messages, trades, records) any command accepts."""


def bounded(kind: Callable[[str], Number], low: float, high: float | None) -> Callable[[str], Number]:
    """An argparse type: a finite number of ``kind`` (int or float) from ``low`` to ``high``.

    The one way every command declares a number on its command line: ``nan``, ``inf`` and
    anything outside the bounds are refused in one line that argparse prefixes with the flag
    (``argument --rate: must be ...``). ``high`` None means no upper limit and is meant only
    for numbers nothing multiplies, sleeps on or allocates by (a seed); everything else names
    its limit (:data:`MAX_SECONDS`, :data:`MAX_COUNT`, or its own).
    """

    def parse(text: str) -> Number:
        try:
            value = kind(text.strip())
        except (ValueError, OverflowError):  # int("9" * 5000) is a ValueError, float("1e999") is inf
            raise argparse.ArgumentTypeError(
                f"{'an integer' if kind is int else 'a number'} expected, got {printable(text)!r}"
            ) from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {printable(text)}")
        if value < low or (high is not None and value > high):
            bounds = f"at least {low:g}" if high is None else f"between {low:g} and {high:g}"
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {printable(text)}")
        return value

    return parse


def exit_with(main: Callable[[], int]) -> NoReturn:
    """Run a tool's `main` and exit with its status; a reader that stops early ends it quietly.

    `python -m benchmarks.capacity --markdown | head` closes the pipe while the tool still
    prints; Python then raises BrokenPipeError from the next write, and again when it flushes
    stdout at exit, so the operator would see a traceback for what they asked for. Here the rest
    of the output goes to /dev/null (the recipe of Python's `signal` documentation) and the
    tool exits as a command killed by SIGPIPE would.
    """
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(EXIT_OUTPUT_CLOSED)
    sys.exit(status)
