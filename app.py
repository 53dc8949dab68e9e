#!/usr/bin/env python3
"""CDK entry point (`cdk synth`, `cdk deploy`): one `ExactlyOnceAggregationStack`.

Every tunable is a `cdk.json` context setting (README lists them). An invalid one stops
synthesis with a one-line message instead of a traceback.
"""

from __future__ import annotations

import sys

from stacks import SettingsError, build_app


def main() -> int:
    """Synthesize the app into `cdk.out/`; exit status 1 on an invalid setting."""
    try:
        app, _stack = build_app()
    except SettingsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
