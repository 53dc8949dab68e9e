"""`python -m audit ...`."""

from audit.cli import main
from toolkit.cli import exit_with

exit_with(main)
