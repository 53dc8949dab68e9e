"""Every relative link and anchor in README.md and docs/*.md resolves, by GitHub's rules.

GitHub renders a heading's anchor as its text lowercased, with everything but letters, digits,
spaces, hyphens and underscores removed (markup such as backticks and link targets first), and
spaces turned into hyphens; a repeated anchor gets `-1`, `-2`, ... Links are checked as GitHub
resolves them: relative to the file, to a file or directory of the repository, with an anchor
(when there is one) among the target Markdown file's headings. Code spans and fenced code are
not links.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted([REPOSITORY_ROOT / "README.md", *(REPOSITORY_ROOT / "docs").glob("*.md")])

_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        match = _FENCE.match(line)
        if match:
            marker = match.group(1)
            if fence is None:
                fence = marker
            elif marker == fence:
                fence = None
            continue
        if fence is None:
            lines.append(line)
    return lines


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading's text (before de-duplication)."""
    text = _CODE_SPAN.sub(lambda match: match.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text, not its target
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = text.strip().lower()
    kept = "".join(
        character
        for character in text
        if character in " -_" or unicodedata.category(character)[0] in ("L", "N") or character == "\u200d"
    )
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a Markdown file's headings (and explicit `<a name>` tags) define."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    for line in prose_lines(path.read_text(encoding="utf-8")):
        found.update(_HTML_ANCHOR.findall(line))
        match = _HEADING.match(line)
        if not match:
            continue
        anchor = github_anchor(match.group(2))
        seen = counts.get(anchor, 0)
        counts[anchor] = seen + 1
        found.add(anchor if seen == 0 else f"{anchor}-{seen}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every inline link, image and reference definition outside code."""
    found: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = _FENCE.match(line)
        if match:
            marker = match.group(1)
            fence = marker if fence is None else (None if marker == fence else fence)
            continue
        if fence is not None:
            continue
        prose = _CODE_SPAN.sub("", line)
        found.extend((number, target) for target in _INLINE_LINK.findall(prose))
        definition = _REFERENCE_DEFINITION.match(prose)
        if definition:
            found.append((number, definition.group(1)))
    return found


def broken_links(path: Path) -> list[str]:
    """One line per relative link or anchor of `path` that does not resolve."""
    broken: list[str] = []
    for number, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith("//"):
            continue  # http:, https:, mailto: ...: not ours to check offline
        file_part, _, anchor = target.partition("#")
        where = f"{path.relative_to(REPOSITORY_ROOT)}:{number}: {target}"
        destination = (path.parent / file_part).resolve() if file_part else path
        if file_part and not destination.exists():
            broken.append(f"{where}: no such file or directory")
            continue
        if not destination.is_relative_to(REPOSITORY_ROOT):
            broken.append(f"{where}: outside the repository")
            continue
        if anchor:
            if destination.suffix != ".md" or destination.is_dir():
                broken.append(f"{where}: an anchor into a file that is not Markdown")
            elif anchor not in anchors(destination):
                broken.append(f"{where}: no heading with anchor #{anchor} in {destination.name}")
    return broken


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: str(path.relative_to(REPOSITORY_ROOT)))
def test_every_relative_link_and_anchor_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_the_documents_are_found() -> None:
    names = {path.name for path in DOCUMENTS}
    assert {"README.md", "design.md", "architecture.md"} <= names


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Try it on AWS for cents", "try-it-on-aws-for-cents"),
        ("Settings (`cdk.json` context)", "settings-cdkjson-context"),
        (
            "Capacity: the target rate, and on-demand or provisioned tables",
            "capacity-the-target-rate-and-on-demand-or-provisioned-tables",
        ),
        ("Watch a deployed stack: the load test's read-back", "watch-a-deployed-stack-the-load-tests-read-back"),
        ("Upgrade in place: `make upgrade`", "upgrade-in-place-make-upgrade"),
        ("Map: idempotent per stream position, not per batch", "map-idempotent-per-stream-position-not-per-batch"),
        ("1. Write cost per ingested message", "1-write-cost-per-ingested-message"),
        (
            "Fewer state writes: the version cache (`stateVersionCacheSize`)",
            "fewer-state-writes-the-version-cache-stateversioncachesize",
        ),
        ("Résumé — naïve", "résumé--naïve"),
    ],
)
def test_anchors_follow_githubs_rules(heading: str, anchor: str) -> None:
    assert github_anchor(heading) == anchor


def test_a_broken_link_and_anchor_are_reported(tmp_path: Path) -> None:
    page = REPOSITORY_ROOT / "docs" / "design.md"
    text = "\n".join(prose_lines(page.read_text(encoding="utf-8")))
    assert "## Messages" in text
    assert "messages" in anchors(page)
    probe = REPOSITORY_ROOT / "docs" / ".link-probe.md"
    probe.write_text(
        "# Probe\n\n[ok](design.md#messages) [gone](nothing.md) [bad](design.md#no-such-heading)"
        " [self](#probe) [self-bad](#nope) `[code](nothing.md)`\n\n```\n[fenced](nothing.md)\n```\n",
        encoding="utf-8",
    )
    try:
        problems = broken_links(probe)
    finally:
        probe.unlink()
    assert [problem.split(": ", 1)[1] for problem in problems] == [
        "nothing.md: no such file or directory",
        "design.md#no-such-heading: no heading with anchor #no-such-heading in design.md",
        "#nope: no heading with anchor #nope in .link-probe.md",
    ]
