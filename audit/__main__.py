"""`python -m audit ...`."""

import sys

from audit.cli import main

sys.exit(main())
