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
from collections.abc import Mapping
from typing import Final

SUPPORTED_NODE_MAJORS: Final = (22, 24)
"""What the jsii runtime of the pinned aws-cdk-lib (requirements.txt) supports; README says so too."""


END_OF_LIFE_VARIABLE: Final = "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"
DEPRECATED_VARIABLE: Final = "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION"


def banner_silencing(environment: Mapping[str, str]) -> dict[str, str]:
    """The variables that silence jsii's banners, as `environment` (the Makefile) set them, else ours.

    jsii silences its end-of-life banner only for the Node.js majors its variable lists
    (``16,18,20``), not for any value: ``1`` silences nothing on Node 20. So whoever starts a
    Node process (the deployer's `cdk synth`) takes these, never a value of its own.
    """
    older = ",".join(str(major) for major in range(10, min(SUPPORTED_NODE_MAJORS)))
    return {
        END_OF_LIFE_VARIABLE: environment.get(END_OF_LIFE_VARIABLE) or older,
        DEPRECATED_VARIABLE: environment.get(DEPRECATED_VARIABLE) or "1",
    }


def silence_node_banners() -> None:
    """Silences jsii's end-of-life and deprecation banners for this process and its children,
    unless the environment already decided (the Makefile exports the same variables)."""
    os.environ.update(banner_silencing(os.environ))
