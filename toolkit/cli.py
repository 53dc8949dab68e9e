"""The command line every operator tool shares: misuse is one line and exit status 2.

argparse's own error prints the whole usage block first; people start these tools by
hand and in CI logs, where one line saying what was wrong (and where help is) reads
better. Each tool keeps its own prefix (`producer: error: `, `error: `, ...) because
scripts and tests match on it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

EXIT_USAGE = 2
"""argparse's convention for wrong arguments, kept by every tool."""

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


def bounded(kind: Callable[[str], Number], low: float, high: float | None = None) -> Callable[[str], Number]:
    """An argparse type: a number of ``kind`` (int or float) from ``low`` to ``high`` (None: no limit)."""

    def parse(text: str) -> Number:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{'an integer' if kind is int else 'a number'} expected, got {text!r}"
            ) from None
        if value < low or (high is not None and value > high):
            bounds = f"at least {low}" if high is None else f"between {low} and {high}"
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {text}")
        return value

    return parse
