"""Live dashboard of the aggregates: a read-only web page and a terminal view.

Both views share one snapshot pipeline (:mod:`frontend.snapshot`): read the
AggregateTable, build the hierarchy tree, derive throughput and latency from
successive ``#stats`` samples, and compare against the producer's ledger. The
renderers (:mod:`frontend.web`, :mod:`frontend.terminal`) only present it.

The AggregateTable's bookkeeping keys come from the pipeline's own names
(`aggregation.names`), so the domain package in ``lambdas/`` is put on the import
path here, as Lambda does with the function asset.
"""

import sys
from pathlib import Path

LAMBDAS_DIR = Path(__file__).resolve().parents[1] / "lambdas"
if str(LAMBDAS_DIR) not in sys.path:
    sys.path.insert(0, str(LAMBDAS_DIR))
