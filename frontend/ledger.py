"""The producer's ledger: the ground truth the dashboard's verification badge compares against.

The producer (``producer/ledger.py``) merges what it sent into a JSON file, by default
``.local/ledger.json``, read as every tool reads it (``toolkit.ledger.load_ledger``, here with
its message counts for the backlog). The file is rewritten while the producer runs, so the
watcher re-reads it when it changes and keeps the last good reading over a half-written file.
"""

from __future__ import annotations

import os
from pathlib import Path

from frontend.snapshot import LedgerState
from toolkit.ledger import LedgerError, load_ledger_with_messages


class LedgerWatcher:
    """Reads the ledger when its file changes, for the builder to call on every refresh.

    The producer may create the file after the dashboard starts, or rewrite it
    while we read it: a missing file means "no ledger yet", and a file that
    fails to parse keeps the last good reading (it is retried on the next
    refresh) unless there never was one.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._version: tuple[int, int] | None = None
        self._state = LedgerState(str(path), None)

    def __call__(self) -> LedgerState:
        """The ledger as of now."""
        try:
            status = os.stat(self._path)
        except OSError:
            self._version = None
            self._state = LedgerState(str(self._path), None)
            return self._state
        version = (status.st_mtime_ns, status.st_size)
        if version == self._version:
            return self._state
        try:
            nodes, messages = load_ledger_with_messages(self._path)
        except LedgerError as error:
            if self._state.nodes is None:
                self._state = LedgerState(str(self._path), None, str(error))
            return self._state
        self._version = version
        self._state = LedgerState(str(self._path), nodes, messages=messages)
        return self._state
