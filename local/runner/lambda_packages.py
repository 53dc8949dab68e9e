"""The packages a function sees on Lambda, laid out on disk for the local execution environments.

On Lambda a Python function imports from, in order (Lambda Developer Guide, "Working with layers
for Python Lambda functions" and "Packaging your layer content"): its deployment package
(`LAMBDA_TASK_ROOT`), each layer's ``python/lib/python3.x/site-packages`` and ``python``
directories, then the runtime's own directory (`LAMBDA_RUNTIME_DIR`), which holds the AWS SDK
(boto3 and what it needs), then the standard library. Nothing else: not the packages of the
machine that built the asset.

So each worker imports from exactly these, built here from the development environment's
installed distributions at their pinned versions (requirements.txt and constraints.txt; a test
keeps the Powertools pin equal to the layer version the stack deploys):

- the runtime directory: `boto3` and every distribution it requires (`RUNTIME_SDK`). We use the
  runtime's SDK rather than bundling one into the asset: the calls the functions make
  (`BatchExecuteStatement`, `TransactWriteItems`, conditional S3 writes) are years older than any
  supported runtime, and a bundled SDK would add about 25 MB to every cold start;
- the Powertools layer: `aws-lambda-powertools` and what it requires without extras, as the
  publisher's layer holds it (the layer also carries extras the functions never import);
- the deployment package: the function's own extracted asset, whose protobuf is pure Python
  (`stacks.functions.FUNCTION_DEPENDENCIES`), so it runs that implementation here as on Lambda.

Only pure-Python files are taken (`COMPILED_SUFFIXES` left out, as the asset bundler does): the
worker's interpreter is this machine's, and a compiled module of the development environment
would hide what the function really runs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Final

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from local.deploy.deployer import LOCAL_POWERTOOLS_LAYER_NAME
from local.paths import REPO_ROOT

RUNTIME_SDK: Final[str] = "boto3"
"""The distribution the Lambda Python runtime provides in `LAMBDA_RUNTIME_DIR` (with its requirements)."""
POWERTOOLS: Final[str] = "aws-lambda-powertools"
COMPILED_SUFFIXES: Final[frozenset[str]] = frozenset({".so", ".pyd", ".pyc"})
PACKAGES_DIR: Final[Path] = REPO_ROOT / ".local" / "lambda-packages"
"""Built once per set of versions, shared by every local runtime of this checkout."""


class UnknownLayer(ValueError):
    """A function names a layer the local runtime has no contents for."""


def required_distributions(root: str) -> list[str]:
    """`root` and every distribution it requires, transitively, without extras, in a stable order."""
    found: dict[str, str] = {}
    waiting = [root]
    while waiting:
        name = waiting.pop()
        key = canonicalize_name(name)
        if key in found:
            continue
        found[key] = name
        for requirement in metadata.requires(name) or []:
            parsed = Requirement(requirement)
            if parsed.marker is None or parsed.marker.evaluate({"extra": ""}):
                waiting.append(parsed.name)
    return sorted(found.values(), key=canonicalize_name)


def pure_python_files(distribution: str) -> list[tuple[Path, Path]]:
    """(installed file, path relative to its site-packages) of every pure-Python file of `distribution`."""
    files = metadata.files(distribution) or []
    return [
        (Path(str(file.locate())), Path(str(file)))
        for file in files
        if file.suffix not in COMPILED_SUFFIXES and ".." not in file.parts and "__pycache__" not in file.parts
    ]


def _directory_name(kind: str, distributions: Iterable[str]) -> str:
    versions = "_".join(f"{canonicalize_name(name)}-{metadata.version(name)}" for name in distributions)
    return f"{kind}-{versions}"


def _install(target: Path, distributions: Sequence[str]) -> Path:
    """Lay `distributions` out under `target` once; concurrent builders race to one rename."""
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    for distribution in distributions:
        for installed, inside in pure_python_files(distribution):
            (building / inside).parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(installed, building / inside)
            except OSError:  # another file system
                shutil.copyfile(installed, building / inside)
    try:
        building.rename(target)
    except OSError:  # another builder won the race
        shutil.rmtree(building, ignore_errors=True)
    return target


def runtime_directory(packages_dir: Path = PACKAGES_DIR) -> Path:
    """`LAMBDA_RUNTIME_DIR`'s Python packages: the SDK the runtime provides."""
    distributions = required_distributions(RUNTIME_SDK)
    return _install(packages_dir / _directory_name("runtime", distributions), distributions)


def layer_directories(layer_arn: str, packages_dir: Path = PACKAGES_DIR) -> list[Path]:
    """A layer's import directories, as Lambda extracts it under ``/opt``: ``python`` (the
    ``lib/python3.x/site-packages`` form is not used by the layers we know)."""
    name = layer_arn.split(":")[6] if layer_arn.count(":") >= 6 else layer_arn
    if name != LOCAL_POWERTOOLS_LAYER_NAME:
        raise UnknownLayer(f"the local runtime has no contents for layer {layer_arn!r} (it knows the Powertools layer)")
    distributions = required_distributions(POWERTOOLS)
    opt = _install(packages_dir / _directory_name("layer", distributions), distributions)
    return [opt]


def import_directories(layer_arns: Sequence[str], packages_dir: Path = PACKAGES_DIR) -> list[Path]:
    """What a function with these layers imports from after its own package, in Lambda's order."""
    layers = [directory for arn in layer_arns for directory in layer_directories(arn, packages_dir)]
    return [*layers, runtime_directory(packages_dir)]
