"""Reproducible measurements of the pipeline and a capacity planner; results in docs/benchmarks.md.

`python -m benchmarks run --output docs/benchmarks.md` (what `make bench` runs) measures
write cost, state-function throughput, handler CPU overhead and the local end-to-end
pipeline in one run; `python -m benchmarks.capacity --rate 50000` sizes a deployment.

The handlers are imported the way Lambda imports them (`import aggregation`), so the
`lambdas/` directory goes on the import path here, as pytest and mypy put it there.
"""

import sys
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
LAMBDAS_DIRECTORY = REPOSITORY_ROOT / "lambdas"

if str(LAMBDAS_DIRECTORY) not in sys.path:
    sys.path.insert(0, str(LAMBDAS_DIRECTORY))
if str(REPOSITORY_ROOT) not in sys.path:
    sys.path.insert(0, str(REPOSITORY_ROOT))
