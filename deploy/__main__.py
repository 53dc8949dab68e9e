"""`python -m deploy ...`."""

from toolkit.node_runtime import silence_node_banners

# The settings are validated with the CDK's own types, which start its Node runtime; as `make`
# does, keep that runtime's Node-version banners off the one-line output.
silence_node_banners()

from deploy.cli import main  # noqa: E402
from toolkit.cli import exit_with  # noqa: E402

exit_with(main)
