"""Entry point of ``python -m frontend`` (see :mod:`frontend.cli`)."""

import sys

from frontend.cli import main
from toolkit.cli import exit_with

try:
    exit_with(main)
except KeyboardInterrupt:  # Ctrl-C while still starting up
    sys.exit(130)
