"""The ledger's journal: what Kinesis accepted, appended as it is acknowledged, so a kill loses nothing.

Why: the ledger is written whole at the end of a run. A producer stopped before that (Ctrl-C
twice, SIGTERM from `timeout` or CI, a closed terminal, SIGKILL) used to leave the ledger of
before the run, and `verify` then reported every node the run touched as wrong. Now every
sending process appends to its own journal beside the ledger (``<ledger>.journal-<run>-<n>``):

- ``{"sending": <chunk>, "messages": <n>}`` before a put_records call of a chunk's messages;
- ``{"accepted": <chunk>, "messages": [...]}`` for the messages of that chunk Kinesis accepted
  (their ground truth: kind, TradeID, Version, Value as a decimal string, Hierarchy);
- ``{"settled": <chunk>}`` once the chunk's outcome is known (all accepted, or the rest
  certainly refused).

Each line is one ``write`` to a file opened for appending. The kernel completes a write to a
regular file whatever signal arrives, so SIGKILL leaves whole lines (only a crash of the
machine can tear the last one, which is then ignored). `replay` applies a journal to a ledger:
the accepted messages are recorded, and the messages of a chunk sent but never settled, less
those accepted, are *in doubt* (they may or may not have reached Kinesis) and counted as
``uncertain``, which `verify` reports. At most the chunks in flight are in doubt.

The ledger lists the journals it has absorbed (`Ledger.merged_journals`), so a journal that
outlives the save that absorbed it (a kill between the save and the delete) is not applied
twice.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from producer.generator import GeneratedMessage, MessageKind
from producer.model import TradeState

JOURNAL_INFIX = ".journal-"


def journal_path(ledger_path: Path, run_id: str, process: int) -> Path:
    """The journal of one sending process of one run."""
    return ledger_path.with_name(f"{ledger_path.name}{JOURNAL_INFIX}{run_id}-{process}")


def journals_of(ledger_path: Path) -> list[Path]:
    """Every journal beside the ledger, in name order."""
    return sorted(ledger_path.parent.glob(f"{ledger_path.name}{JOURNAL_INFIX}*"))


class JournalWriter:
    """Appends one process's journal lines, each in a single write, unbuffered."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def _write(self, entry: dict[str, Any]) -> None:
        os.write(self._descriptor, (json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n").encode())

    def sending(self, chunk: int, messages: int) -> None:
        self._write({"sending": chunk, "messages": messages})

    def accepted(self, chunk: int, messages: Sequence[GeneratedMessage]) -> None:
        self._write({"accepted": chunk, "messages": [_entry(message) for message in messages]})

    def settled(self, chunk: int) -> None:
        self._write({"settled": chunk})

    def close(self) -> None:
        os.close(self._descriptor)


def _entry(message: GeneratedMessage) -> list[Any]:
    state = message.state
    return [
        message.kind.value,
        message.trade_id,
        None if state is None else [state.version, format(state.value, "f"), list(state.hierarchy)],
        message.moves,
        message.malformed_kind,
    ]


def journalled_message(entry: list[Any]) -> GeneratedMessage:
    """A journalled message as the ledger needs it (its bytes are not kept: the ledger never reads them)."""
    kind, trade_id, state, moves, malformed_kind = entry
    return GeneratedMessage(
        sequence=0,
        data=b"",
        partition_key=trade_id or "",
        kind=MessageKind(kind),
        trade_id=trade_id,
        state=None if state is None else TradeState(int(state[0]), Decimal(state[1]), tuple(state[2])),
        moves=bool(moves),
        malformed_kind=malformed_kind,
    )


def read_journal(path: Path) -> tuple[list[GeneratedMessage], int]:
    """The messages a journal says Kinesis accepted, and how many more are in doubt."""
    accepted: list[GeneratedMessage] = []
    sending: dict[int, int] = {}
    for entry in _lines(path):
        if "sending" in entry:
            sending[entry["sending"]] = sending.get(entry["sending"], 0) + entry["messages"]
        elif "accepted" in entry:
            messages = [journalled_message(item) for item in entry["messages"]]
            accepted.extend(messages)
            if entry["accepted"] in sending:
                sending[entry["accepted"]] -= len(messages)
        elif "settled" in entry:
            sending.pop(entry["settled"], None)
    return accepted, sum(max(0, left) for left in sending.values())


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    """The journal's whole lines; a torn last line (a machine crash mid-write) is left out."""
    with path.open("rb") as handle:
        for line in handle:
            if not line.endswith(b"\n"):
                return
            yield json.loads(line)
