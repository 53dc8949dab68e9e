"""Reading the JSON files the operator tools share (the ledger, `.local/outputs.json`) in one way.

Any file that cannot be used, whatever the reason (missing, unreadable, a directory, not UTF-8,
not JSON, nested beyond the parser), is one :class:`UnreadableFile` whose message is one line
naming the file; each tool wraps it in its own error (`toolkit.ledger.LedgerError`,
`toolkit.pipeline.TargetError`) and prints it without a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path


class UnreadableFile(Exception):
    """The file cannot be read as JSON; the message names it, in one line."""


def read_json(path: Path, parse_float: Callable[[str], object] | None = Decimal) -> object:
    """The JSON document in ``path`` (numbers with a fraction as exact Decimals by default)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UnreadableFile(f"{path} does not exist") from None
    except OSError as error:
        raise UnreadableFile(f"cannot read {path}: {error.strerror or error}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UnreadableFile(f"{path} is not UTF-8 text (byte {error.start})") from None
    try:
        return json.loads(text, parse_float=parse_float)
    except RecursionError:
        raise UnreadableFile(f"{path} is not valid JSON (nested too deeply)") from None
    except ValueError as error:  # json.JSONDecodeError, and a number Decimal cannot hold
        raise UnreadableFile(f"{path} is not valid JSON ({' '.join(str(error).split())})") from None
