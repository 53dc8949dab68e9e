"""The Node.js versions the pinned CDK supports, and keeping jsii's banners off our output.

The CDK's Python types run in a Node.js process started by jsii at their first import. On a
Node.js release it no longer supports, jsii prints an eleven-line end-of-life banner for every
such process, and when it comes through jsii's Python runtime each line shows as a Python
bytes literal (`b'!!!…'`). `make` says it once, in one line, instead (the Makefile's
`NODE_MAJOR` check); the command-line tools that import the CDK silence the banner before
that import.
"""

from __future__ import annotations

import os
from typing import Final

SUPPORTED_NODE_MAJORS: Final = (22, 24)
"""What the jsii runtime of the pinned aws-cdk-lib (requirements.txt) supports; README says so too."""


def silence_node_banners() -> None:
    """Silences jsii's end-of-life and deprecation banners for this process and its children,
    unless the environment already decided (the Makefile exports the same variables)."""
    older = ",".join(str(major) for major in range(10, min(SUPPORTED_NODE_MAJORS)))
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", older)
    os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
