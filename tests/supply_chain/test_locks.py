"""Supply chain: `make install` installs only hashed, pinned packages, pip included.

The locks are generated (`make lock`), so what is checked here is that they are the pins the
project declares, that every entry carries hashes, and that the Makefile installs from them with
`--require-hashes` and nothing else unhashed (no pip upgrade to "latest", no build isolation).
"""

from __future__ import annotations

import re
import tomllib

from tests.environment import repository_root

ROOT = repository_root()
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^\s\\;]+)", re.MULTILINE)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    return {canonical(name): version for name, version in PIN.findall(text)}


def lock_entries(text: str) -> dict[str, str]:
    """Each entry of a pip-compile lock: its pin line through its last `--hash` line."""
    entries: dict[str, str] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        match = PIN.match(block)
        if match:
            entries[canonical(match.group(1))] = block
    return entries


def test_the_lock_pins_exactly_what_constraints_txt_pins_plus_the_build_backend() -> None:
    constraints = pins((ROOT / "constraints.txt").read_text())
    locked = pins((ROOT / "requirements.lock").read_text())
    build_backend = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    assert build_backend == ["setuptools==80.9.0"]
    assert locked == {**constraints, "setuptools": "80.9.0"}
    requirements = (ROOT / "requirements.txt").read_text() + (ROOT / "requirements-dev.txt").read_text()
    for name, version in pins(requirements).items():
        assert locked[name] == version, name


def test_every_locked_package_carries_its_hashes() -> None:
    for lock in ("requirements.lock", "requirements-pip.lock", "requirements-checkov.lock"):
        entries = lock_entries((ROOT / lock).read_text())
        assert entries, lock
        for name, entry in entries.items():
            assert re.search(r"--hash=sha256:[0-9a-f]{64}", entry), f"{lock}: {name} has no hash"


def test_pip_itself_is_pinned_and_hashed() -> None:
    assert list(pins((ROOT / "requirements-pip.lock").read_text())) == ["pip"]


def test_make_install_requires_hashes_and_fetches_nothing_unhashed() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("$(BIN)/.installed:", 1)[1].split("\n\n", 1)[0]
    installs = [line.strip() for line in recipe.splitlines() if " install " in line]
    assert installs == [
        "$(PIP) install --require-hashes -r requirements-pip.lock",
        "$(PIP) install --require-hashes -r requirements.lock",
        "$(PIP) install --no-deps --no-build-isolation --editable .",
    ]
    assert "--upgrade" not in recipe
    prerequisites = recipe.splitlines()[0].split()
    assert {"requirements-pip.lock", "requirements.lock", "pyproject.toml"} <= set(prerequisites)
