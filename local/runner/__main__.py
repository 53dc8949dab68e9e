"""`python -m local.runner --state-dir .local`: the runner process `make up` starts."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from local.deploy.deployer import Deployment
from local.paths import LocalPaths
from local.runner.pollers import DEFAULT_POLL_INTERVAL_SECONDS
from local.runner.runner import Runner
from toolkit.cli import exit_with


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m local.runner", description=__doc__)
    parser.add_argument("--state-dir", type=Path, default=LocalPaths.default().state_dir)
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=float(os.environ.get("LOCAL_RUNNER_POLL_INTERVAL", DEFAULT_POLL_INTERVAL_SECONDS)),
        help="seconds between reads of an idle shard (Lambda: ~1 s for Kinesis)",
    )
    arguments = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(threadName)s %(levelname)s %(message)s", stream=sys.stderr
    )
    paths = LocalPaths(arguments.state_dir)
    try:
        deployment = Deployment.from_json(json.loads(paths.deployment.read_text()))
    except (OSError, ValueError, KeyError) as error:
        print(f"runner: no deployment recorded in {paths.deployment} ({error}); run `make up`", file=sys.stderr)
        return 2
    runner = Runner(deployment, paths, poll_interval_seconds=arguments.poll_interval)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    runner.start()
    stopped.wait()
    logging.getLogger(__name__).info("runner stopping")
    runner.stop()
    return 0


if __name__ == "__main__":
    exit_with(main)
