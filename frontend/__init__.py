"""Live dashboard of the aggregates: a read-only web page and a terminal view.

Both views share one snapshot pipeline (:mod:`frontend.snapshot`): read the
AggregateTable, build the hierarchy tree, derive throughput and latency from
successive ``#stats`` samples, and compare against the producer's ledger. The
renderers (:mod:`frontend.web`, :mod:`frontend.terminal`) only present it.

The AggregateTable's bookkeeping keys come from the pipeline's own names
(`aggregation.names`, importable because `pyproject.toml` declares the packages under
``lambdas/`` too).
"""
