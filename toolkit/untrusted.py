"""Showing untrusted text (node names, TradeIDs, level values, quarantine reasons) safely.

Anyone with put access to the stream chooses those strings, and every operator tool shows
them. Two ways they could forge what the operator sees:

- **Control characters.** A terminal acts on ``ESC[2J`` (clear the screen), OSC 0 (the
  window title), OSC 8 (hyperlinks) and OSC 52 (write the clipboard); rich's `Text` drops
  only BEL, BS, VT, FF and CR. Bidirectional overrides and isolates (U+202A..U+202E,
  U+2066..U+2069) reorder what follows them, in a terminal and in a browser alike.
  :func:`printable` spells every such character as a visible escape (``\\x1b``,
  ``\\u202e``), so the text is shown and nothing acts on it.
- **rich markup.** A string handed to rich as ``str`` is parsed as markup: ``Delta[/]``
  raises `MarkupError`, ``[bold green]verdict: MATCH`` prints a forged verdict,
  ``[link=…]`` makes a link. :func:`untrusted_text` returns a `rich.text.Text`, which is
  never parsed, with :func:`printable` applied.

The state function refuses exactly these characters in TradeIDs and level values
(`aggregation.messages`, docs/design.md "Messages"), so what the pipeline accepts is shown
verbatim; the renderers escape anyway, for what was written before that rule, other
sources (the archive, a ledger, a table written by hand) and strings the door never sees.
The character class is written in both places because this package never imports the
pipeline's code (see `toolkit`); `tests/toolkit/test_untrusted.py` checks over every code
point that the two agree.
"""

from __future__ import annotations

import re

from rich.text import Text

UNSAFE_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""C0 controls, DEL, C1 controls, and the bidirectional embeddings, overrides and isolates."""


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control and bidirectional-control character spelled as an escape."""
    return UNSAFE_CHARACTERS.sub(_escape, text)


def untrusted_text(text: str, style: str = "") -> Text:
    """``text`` as rich shows it literally: never parsed as markup, no control characters."""
    return Text(printable(text), style=style)
