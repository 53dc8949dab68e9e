"""Operator tools for the audit archive: `python -m audit reconcile | rebuild`.

The tools read the archived delta objects with the same strict parser the archive is tested
with (`aggregation.archive`), so the pure domain in ``lambdas/`` is put on the import path
here, as Lambda does with the function asset.
"""

import sys
from pathlib import Path

LAMBDAS_DIR = Path(__file__).resolve().parents[1] / "lambdas"
if str(LAMBDAS_DIR) not in sys.path:
    sys.path.insert(0, str(LAMBDAS_DIR))
