"""`python -m benchmarks.profile_summary RAW`: py-spy's raw output as top frames per process, in markdown.

For the profiles in docs/benchmarks.md (section "Profiles"), which are written once, not by
`make bench`: sampling another process needs py-spy, which the project does not install. The
command that records them is in that section. py-spy's raw format (`--format raw`) is one line
per distinct stack, frames root first and separated by `;`, then the number of samples; with
`--subprocesses` the first frames name the process (`process 42:"python -m ..."`). A stack is
counted for the innermost process it names: the runner, or a worker, named after its handler's
package (`state_function`, ...).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from toolkit.cli import exit_with

PROCESS_FRAME = re.compile(r'^process \d+:"(?P<command>.*)"$')
BOILERPLATE = re.compile(r"threading\.py|_bootstrap|runpy|<module>|concurrent/futures/thread\.py")
"""Frames every thread of a process has at its root: left out of the inclusive ranking."""
ROOT_SHARE = 0.95
"""A frame on this share of a process's samples or more is a root (the worker's loop, the handler's
decorators): left out of the inclusive ranking, which is about where the time divides."""
LINE_NUMBER = re.compile(r":\d+\)$")
PATH_PREFIX = re.compile(r"\((?:.*/site-packages/|.*/lib/python3\.\d+/|.*?/(?=(?:lambdas|local|benchmarks)/))")


@dataclass(frozen=True)
class ProcessProfile:
    name: str
    samples: int
    self_frames: list[tuple[str, int]]  # most samples first
    inclusive_frames: list[tuple[str, int]]


def frame_name(frame: str) -> str:
    """`function (path)` without the line number and with the path from its package on."""
    return PATH_PREFIX.sub("(", LINE_NUMBER.sub(")", frame))


def process_name(command: str) -> str:
    """`runner`, or the package of the handler a worker runs (its last argument)."""
    last = command.rsplit(maxsplit=1)[-1] if command.strip() else "?"
    if "local.runner.execution_environment" in command:
        return last.split(".", maxsplit=1)[0]
    return "runner" if "local.runner" in command else last


def summarise(lines: Iterable[str], top: int = 10) -> list[ProcessProfile]:
    stacks: dict[str, list[tuple[list[str], int]]] = defaultdict(list)
    for line in lines:
        stack, _, samples = line.rstrip("\n").rpartition(" ")
        if not stack:
            continue
        raw_frames = stack.split(";")
        processes = [m.group("command") for f in raw_frames if (m := PROCESS_FRAME.match(f))]
        name = process_name(processes[-1]) if processes else "all"
        frames = [frame_name(f) for f in raw_frames if not PROCESS_FRAME.match(f)]
        if frames:
            stacks[name].append((frames, int(samples)))
    profiles = []
    for name, rows in sorted(stacks.items()):
        own: Counter[str] = Counter()
        inclusive: Counter[str] = Counter()
        for frames, count in rows:
            own[frames[-1]] += count
            for frame in set(frames):
                if not BOILERPLATE.search(frame):
                    inclusive[frame] += count
        total = sum(count for _, count in rows)
        below_root = [(frame, count) for frame, count in inclusive.most_common() if count < ROOT_SHARE * total]
        profiles.append(ProcessProfile(name, total, own.most_common(top), below_root[:top]))
    return profiles


def render(profiles: Sequence[ProcessProfile]) -> str:
    lines = []
    for profile in profiles:
        lines += [
            f"**{profile.name}** ({profile.samples:,} samples)",
            "",
            "| self | frame | | inclusive | frame |",
            "| ---: | --- | --- | ---: | --- |",
        ]
        rows = max(len(profile.self_frames), len(profile.inclusive_frames))
        for index in range(rows):
            cells = []
            for frames in (profile.self_frames, profile.inclusive_frames):
                if index < len(frames):
                    frame, count = frames[index]
                    cells.append(f"{count / profile.samples:.1%} | `{frame}`")
                else:
                    cells.append(" | ")
            lines.append(f"| {cells[0]} | | {cells[1]} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_summary", description=__doc__)
    parser.add_argument("raw", type=Path, help="py-spy record --format raw output")
    parser.add_argument("--top", type=int, default=10)
    arguments = parser.parse_args(argv)
    print(render(summarise(arguments.raw.read_text().splitlines(), arguments.top)))
    return 0


if __name__ == "__main__":
    exit_with(main)
