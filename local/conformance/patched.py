"""pytest plugin: moto with every patch of `local.emulator` applied, in the test process.

The emulator installs `moto_compat.apply()` and then `speedups.apply()` before it serves
(`local.emulator.__main__.serve`); moto's own tests run moto in process (``mock_aws``), so
this plugin installs the same patches, in the same order, when pytest loads it (``-p
local.conformance.patched``): before any test module is imported, as the server does before
its first request. `CompatMiddleware` wraps the server's WSGI app and has no in-process
counterpart; tests/local/emulator/test_cross_origin.py and test_transaction_conflicts.py
prove it.
"""

from __future__ import annotations

from local.emulator import moto_compat, speedups

moto_compat.apply()
speedups.apply()
