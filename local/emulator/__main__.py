"""``python -m local.emulator serve --port N [--host 127.0.0.1] [--verbose]``: the server itself.

`local.emulator.control.start_emulator` runs this in its own process. moto is imported only
here, so callers of `start_emulator` never pay for importing it.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server

from local.emulator import moto_compat, speedups
from local.emulator.control import HOST, endpoint_url_for
from toolkit.cli import exit_with


def serve(host: str, port: int, verbose: bool = False) -> None:
    """Serve moto, with `moto_compat` and `speedups` applied and `CompatMiddleware` in front, until killed."""
    moto_compat.apply()
    speedups.apply()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # One log line per request costs throughput and says little; errors still show.
    logging.getLogger("werkzeug").setLevel(logging.INFO if verbose else logging.WARNING)
    app = moto_compat.CompatMiddleware(DomainDispatcherApplication(create_backend_app))
    server = make_server(host, port, app, threaded=True, request_handler=speedups.KeepAliveRequestHandler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    logging.getLogger(__name__).info(
        "emulator serving on %s with fixes %s", endpoint_url_for(port, host), moto_compat.applied_fixes()
    )
    try:
        server.serve_forever()
    finally:
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    """``python -m local.emulator serve --port N``: run the server in the foreground."""
    parser = argparse.ArgumentParser(
        prog="python -m local.emulator", description="The embedded AWS emulator (moto with local.emulator.moto_compat)."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser("serve", help="serve moto with the compat fixes until killed")
    serve_parser.add_argument("--port", type=int, required=True)
    serve_parser.add_argument("--host", default=HOST)
    serve_parser.add_argument("--verbose", action="store_true", help="log every request")
    arguments = parser.parse_args(argv)
    if arguments.command == "serve":
        serve(arguments.host, arguments.port, arguments.verbose)
    return 0


if __name__ == "__main__":
    exit_with(main)
