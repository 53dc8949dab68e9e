"""`python -m deploy ...`."""

import os
import sys

# The settings are validated with the CDK's own types, which start its Node runtime; as `make`
# does, keep that runtime's Node-version banners off the one-line output.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "16,18,20")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")

from deploy.cli import main

sys.exit(main())
