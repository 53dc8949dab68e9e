"""Operator tools for the audit archive: `python -m audit reconcile | rebuild`.

The tools read the archived delta objects with the same strict parser the archive is tested
with (`aggregation.archive`), imported as the functions import it: pyproject.toml declares
the packages of ``lambdas/`` with the tools' own.
"""
