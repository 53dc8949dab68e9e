"""Operator tools for the audit archive: `python -m audit reconcile | rebuild`.

The tools read the archived objects (batch objects, receipts, and the per-item objects and
registry of earlier releases) with the same strict parsers the archive is tested with
(`aggregation.archive`, `aggregation.archive_legacy`), imported as the functions import them:
pyproject.toml declares the packages of ``lambdas/`` with the tools' own.
"""
