"""The producer's ledger: the ground truth the dashboard's verification badge compares against.

The producer (``producer/ledger.py``) merges what it sent into a JSON file, by default
``.local/ledger.json``, read as every tool reads it (``toolkit.ledger.load_ledger``, here with
its message counts for the backlog). The file is rewritten while the producer runs, so the
watcher re-reads it when it changes and keeps the last good reading over a half-written file.

The ledger itself is written when a send ends. While it runs, every sending process journals
what Kinesis acknowledges beside it (``ledger.json.journal-<run>-<process>``, `producer.journal`),
so the watcher reads those too, every process's, the way the producer's next `verify` would
(`producer.ledger.Ledger.load`: the ledger, then each journal it has not merged yet). So the
backlog, the lag and "draining: X of Y" move while the send runs, not only after it.
"""

from __future__ import annotations

import os
from pathlib import Path

from frontend.snapshot import LedgerState
from producer.journal import journals_of
from producer.ledger import Ledger
from toolkit.ledger import LedgerError, LedgerMessages, NodeTotals, load_ledger_with_messages

FileVersion = tuple[str, int, int]
"""A file's name, modification time (ns) and size: it changed when this did."""


def _version(path: Path) -> FileVersion | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (path.name, status.st_mtime_ns, status.st_size)


def read_ledger_and_journals(path: Path) -> tuple[dict[str, NodeTotals], LedgerMessages | None]:
    """The ledger at `path` with every journal beside it that it has not merged yet.

    Without journals it is the tolerant reading every tool makes (`toolkit.ledger`); with them,
    the producer's own (`Ledger.load`, which applies their acknowledged messages, highest version
    winning, in memory: nothing is written)."""
    if not journals_of(path):
        return load_ledger_with_messages(path)
    ledger = Ledger.load(path)
    nodes = {key: NodeTotals(node.value, node.trade_count) for key, node in ledger.aggregates().items()}
    counts = ledger.counts
    return nodes, LedgerMessages(sent=counts.messages_sent, to_apply=counts.new_trades + counts.modifications)


class LedgerWatcher:
    """Reads the ledger (and the send's journals) when a file changes, for the builder to call on
    every refresh.

    The producer may create the files after the dashboard starts, or rewrite the ledger
    while we read it: no ledger and no journal means "no ledger yet", and a reading that
    fails keeps the last good reading (it is retried on the next refresh) unless there
    never was one.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._version: tuple[FileVersion | None, ...] | None = None
        self._state = LedgerState(str(path), None)

    def __call__(self) -> LedgerState:
        """The ledger as of now."""
        journals = journals_of(self._path)
        version = (_version(self._path), *(_version(journal) for journal in journals))
        if version[0] is None and not journals:
            self._version = None
            self._state = LedgerState(str(self._path), None)
            return self._state
        if version == self._version:
            return self._state
        try:
            nodes, messages = read_ledger_and_journals(self._path)
        except (LedgerError, OSError, ValueError) as error:
            if self._state.nodes is None:
                self._state = LedgerState(str(self._path), None, str(error))
            return self._state
        self._version = version
        self._state = LedgerState(str(self._path), nodes, messages=messages)
        return self._state
