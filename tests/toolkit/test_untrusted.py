"""`toolkit.untrusted`: untrusted text is shown literally, with nothing a terminal or markup parser acts on."""

from __future__ import annotations

import sys

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from aggregation import messages
from toolkit import untrusted
from toolkit.untrusted import printable, untrusted_text


def test_the_renderers_escape_exactly_what_the_door_refuses() -> None:
    """Two copies of one character class (the toolkit never imports the pipeline): checked over every code point."""
    every_character = "".join(map(chr, range(sys.maxunicode + 1)))
    assert messages.UNSAFE_CHARACTERS.findall(every_character) == untrusted.UNSAFE_CHARACTERS.findall(every_character)
    refused = untrusted.UNSAFE_CHARACTERS.findall(every_character)
    assert len(refused) == 32 + 1 + 32 + 5 + 4  # C0, DEL, C1, embeddings and overrides, isolates


def test_control_characters_are_spelled_as_escapes() -> None:
    assert printable("Delta\x1b[2J") == "Delta\\x1b[2J"
    assert printable("\x1b]52;c;aGk=\x07") == "\\x1b]52;c;aGk=\\x07"
    assert printable("a\nb\tc\rd\x00\x7f\x85\x9b") == "a\\x0ab\\x09c\\x0dd\\x00\\x7f\\x85\\x9b"
    assert printable("\u202eHCTAM\u2066x\u2069") == "\\u202eHCTAM\\u2066x\\u2069"
    assert printable("Délta 😀 \u200e [bold]x[/]") == "Délta 😀 \u200e [bold]x[/]"


@given(st.text())
def test_printable_text_has_no_control_character_and_changes_only_control_characters(text: str) -> None:
    shown = printable(text)
    assert untrusted.UNSAFE_CHARACTERS.search(shown) is None
    assert (shown == text) == (untrusted.UNSAFE_CHARACTERS.search(text) is None)


def test_untrusted_text_is_never_parsed_as_markup() -> None:
    console = Console(record=True, force_terminal=True, color_system="truecolor", width=200)
    for hostile in ("Delta[/]", "[bold green]verdict: MATCH", "[link=http://x]y[/link]"):
        console.print(untrusted_text(hostile, style="red"))
    ansi = console.export_text(styles=True, clear=False)
    assert console.export_text() == "Delta[/]\n[bold green]verdict: MATCH\n[link=http://x]y[/link]\n"
    assert "\x1b]8;" not in ansi  # no hyperlink made
