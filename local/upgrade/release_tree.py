"""A release's own tree, synthesized into its cloud assembly once, with this checkout's tools.

The tree comes from this clone's history (`git archive <commit>`: no network, and nothing of
this checkout's work tree or worktree list touched). It is synthesized with this checkout's
pinned CDK CLI and venv, which is faithful only when the release pinned the same versions of
everything it shares with this checkout (`incompatible_pins`): otherwise the refusal says
which pin differs, and that release needs its own `make install` in its own tree. The
release's packages come first on the app's PYTHONPATH, so its stacks and its function code
are the release's, never this checkout's (the venv has this checkout installed editable).

Both are kept under `<repo>/.local/releases/<full commit>/` (a release never changes), so
only the first upgrade from a release pays for its synthesis.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import re
import shutil
import subprocess
import tarfile
from collections.abc import Mapping
from pathlib import Path

from local.deploy.deployer import DeploymentError, run_cdk_synth, synthesize
from local.paths import REPO_ROOT

RELEASES_CACHE = REPO_ROOT / ".local" / "releases"
PIN = re.compile(r"^\s*([A-Za-z0-9_.\-\[\]]+)\s*==\s*([^\s;#]+)")


class ReleaseTreeError(RuntimeError):
    """A release's tree could not be had or synthesized; the message says why in one line."""


def _git(repo_root: Path, *arguments: str) -> bytes:
    completed = subprocess.run(["git", "-C", str(repo_root), *arguments], capture_output=True, check=False)
    if completed.returncode != 0:
        first = completed.stderr.decode(errors="replace").strip().splitlines()[:1]
        raise ReleaseTreeError(f"git {' '.join(arguments)}: {first[0] if first else 'failed'}")
    return completed.stdout


def full_commit(commit: str, repo_root: Path = REPO_ROOT) -> str:
    """The full id of `commit`, which this clone's history must hold (a shallow clone may not)."""
    try:
        return _git(repo_root, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}").decode().strip()
    except ReleaseTreeError:
        raise ReleaseTreeError(f"commit {commit} is not in this clone's history (fetch the full history)") from None


def pins(text: str) -> dict[str, str]:
    """`name==version` lines of a constraints file, names normalised as pip does (PEP 503)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if match := PIN.match(line):
            name = re.sub(r"[-_.]+", "-", match.group(1).split("[")[0]).lower()
            found[name] = match.group(2)
    return found


def incompatible_pins(release_tree: Path, tools_root: Path = REPO_ROOT) -> list[str]:
    """Every pin the release shares with this checkout at another version (the CDK CLI included)."""
    ours = pins((tools_root / "constraints.txt").read_text())
    theirs = pins((release_tree / "constraints.txt").read_text()) if (release_tree / "constraints.txt").exists() else {}
    differing = [
        f"{name}=={version} (here {ours[name]})"
        for name, version in theirs.items()
        if ours.get(name, version) != version
    ]
    ours_cli = json.loads((tools_root / "package.json").read_text()).get("devDependencies", {}).get("aws-cdk")
    theirs_cli = json.loads((release_tree / "package.json").read_text()).get("devDependencies", {}).get("aws-cdk")
    if ours_cli != theirs_cli:
        differing.append(f"aws-cdk CLI {theirs_cli} (here {ours_cli})")
    return differing


def extract_tree(commit: str, destination: Path, repo_root: Path = REPO_ROOT) -> None:
    """The files of `commit` under `destination` (`git archive`), written whole or not at all."""
    partial = destination.with_name(destination.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(_git(repo_root, "archive", "--format=tar", commit))) as archive:
        archive.extractall(partial, filter="data")
    partial.rename(destination)


def context_suffix(context: Mapping[str, str]) -> str:
    """A directory suffix naming `context` (empty for none): each context has its own assembly."""
    if not context:
        return ""
    canonical = json.dumps(dict(context), sort_keys=True)
    return "-" + hashlib.sha256(canonical.encode()).hexdigest()[:12]


def release_assembly(
    commit: str,
    *,
    context: Mapping[str, str] | None = None,
    repo_root: Path = REPO_ROOT,
    cache: Path = RELEASES_CACHE,
) -> Path:
    """The cloud assembly of the release at `commit`, synthesized from its own tree (with the
    `cdk.json` context overrides `context`, as `cdk deploy -c key=value` would be given)."""
    full = full_commit(commit, repo_root)
    home = cache / full
    tree = home / "tree"
    cdk_out = tree / f"cdk.out{context_suffix(context or {})}"
    home.mkdir(parents=True, exist_ok=True)
    with (home / "synth.lock").open("w") as lock:  # one synthesis of a release at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (cdk_out / "manifest.json").is_file():
            return cdk_out
        if not tree.is_dir():
            extract_tree(full, tree, repo_root)
        if differing := incompatible_pins(tree, repo_root):
            raise ReleaseTreeError(
                f"release {commit} pins {', '.join(differing)}: synthesizing it with this checkout's tools "
                "would not be the release; install it in its own tree"
            )
        try:
            run_cdk_synth(
                tree, tools_root=repo_root, python_path=(tree, tree / "lambdas"), output=cdk_out, context=context
            )
        except DeploymentError as error:
            raise ReleaseTreeError(f"release {commit}: {error}") from None
    return cdk_out


def checkout_assembly(context: Mapping[str, str], *, repo_root: Path = REPO_ROOT) -> Path:
    """This checkout's cloud assembly with `context` overrides (none: `cdk.out`, kept fresh by
    `deployer.synthesize`; otherwise synthesized anew into `.local/releases/checkout<suffix>/`)."""
    if not context:
        return synthesize(repo_root)
    output = repo_root / ".local" / "releases" / f"checkout{context_suffix(context)}" / "cdk.out"
    try:
        run_cdk_synth(repo_root, tools_root=repo_root, output=output, context=context)
    except DeploymentError as error:
        raise ReleaseTreeError(f"this checkout: {error}") from None
    return output
