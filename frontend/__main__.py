"""Entry point of ``python -m frontend`` (see :mod:`frontend.cli`)."""

import sys

from frontend.cli import main

try:
    sys.exit(main())
except KeyboardInterrupt:  # Ctrl-C while still starting up
    sys.exit(130)
