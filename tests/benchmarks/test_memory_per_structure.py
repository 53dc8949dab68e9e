"""The per-structure memory measurement behind docs/benchmarks.md ("Memory per structure").

It installs the compat fixes and speedups into moto in its own process, so it runs as a
subprocess here: nothing it patches reaches the other tests.
"""

import re
import subprocess
import sys

from local.paths import REPO_ROOT


def run(*arguments: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "benchmarks.memory_per_structure", *arguments]
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)


def test_each_structure_is_measured_and_the_savings_show() -> None:
    finished = run("--count", "400")
    assert finished.returncode == 0, finished.stderr
    rows = dict(re.findall(r"^\| (.+?) \| ([\d,]+) \|$", finished.stdout, flags=re.MULTILINE))
    sizes = {label: int(size.replace(",", "")) for label, size in rows.items()}
    assert len(sizes) == 12, finished.stdout

    def size(*words: str) -> int:
        (found,) = [value for label, value in sizes.items() if all(word in label for word in words)]
        return found

    for event_id in ("AWS", "emulator"):
        assert size(event_id, "(packed)") < 0.8 * size(event_id, "OrderedDict")
    assert size("StateTable", "every speedup") < 0.9 * size("StateTable", "but `share_equal_string_values`")
    assert size("StateTable", "every speedup") < size("StateTable", "moto's own")


def test_a_count_too_small_to_measure_is_refused_in_one_line() -> None:
    finished = run("--count", "5")
    assert finished.returncode == 2 and "--count must be at least 100" in finished.stderr
    assert "Traceback" not in finished.stderr
