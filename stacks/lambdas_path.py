"""Puts ``lambdas/`` on the import path, as Lambda does with the function asset.

The settings validation reads the domain's own limits (`aggregation.value_domain`,
`aggregation.delta_item_size`) instead of restating them; `stacks/__init__.py` imports
this module before any other part of the app.
"""

import sys
from pathlib import Path

LAMBDAS_DIRECTORY = Path(__file__).resolve().parents[1] / "lambdas"
if str(LAMBDAS_DIRECTORY) not in sys.path:
    sys.path.insert(0, str(LAMBDAS_DIRECTORY))
