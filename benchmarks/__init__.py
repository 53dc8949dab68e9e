"""Reproducible measurements of the pipeline and a capacity planner; results in docs/benchmarks.md.

`python -m benchmarks run --output docs/benchmarks.md` (what `make bench` runs) measures
write cost, state-function throughput, handler CPU overhead and the local end-to-end
pipeline in one run; `python -m benchmarks.capacity --rate 50000` sizes a deployment.

The handlers are imported the way Lambda imports them (`import aggregation`): pyproject.toml
declares the packages of ``lambdas/`` with the tools' own.
"""

from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
