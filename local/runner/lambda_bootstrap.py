"""The worker of a local Lambda execution environment: Lambda's runtime interface, in one file.

Run by path, never as a module of this repository, by an interpreter started with ``-I -S``
(`execution_environment.ExecutionEnvironment`): isolated from ``PYTHON*`` variables and the
user's site, and without `site`, so no site-packages of the development environment is on
`sys.path`. This file imports the standard library only; it then puts, in front of the
standard library, what a function on Lambda imports from (`lambda_packages`): its deployment
package, its layers, the runtime's SDK. Whatever a handler imports from anywhere else fails
here as it would on Lambda.

Protocol (JSON lines): the worker first writes ``{"ready": ..., "error": ...}`` when its Init
phase (the handler import) is over, and exits after an Init error (Lambda runs Init again on the
next invocation, in a new environment). The parent then writes ``{"id": ..., "event": ...,
"deadline_ms": ..., "function_arn": ...}`` to the worker's stdin; the worker answers ``{"id": ..., "result": ...}`` or
``{"id": ..., "error": {"errorType", "errorMessage", "stackTrace"}}`` on a private pipe,
the worker's original stdout. The handler's own prints and logs (Powertools writes JSON
to stdout) go to stderr, which the runner sends to its log, like CloudWatch Logs.

    python -I -S lambda_bootstrap.py <code dir> <handler string> [<import dir> ...]
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
from typing import Any


class LambdaContext:
    """The subset of the Lambda context object handlers and Powertools use."""

    def __init__(self, request_id: str, deadline_ms: int, invoked_function_arn: str = "") -> None:
        self.function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "local")
        self.function_version = os.environ.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        self.invoked_function_arn = invoked_function_arn
        self.memory_limit_in_mb = int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128"))
        self.aws_request_id = request_id
        self.log_group_name = os.environ.get("AWS_LAMBDA_LOG_GROUP_NAME", "")
        self.log_stream_name = os.environ.get("AWS_LAMBDA_LOG_STREAM_NAME", "")
        self._deadline_ms = deadline_ms

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self._deadline_ms - int(time.time() * 1000))


def _load_handler(handler: str) -> Any:
    module_name, _, function_name = handler.rpartition(".")
    module = importlib.import_module(module_name)
    return getattr(module, function_name)


def _error(exception: BaseException) -> dict[str, Any]:
    return {
        "errorType": type(exception).__name__,
        "errorMessage": str(exception),
        "stackTrace": traceback.format_exception(exception),
    }


def serve(code_dir: str, handler: str, package_dirs: list[str]) -> int:
    """Worker main loop: import the handler once (the init phase), then answer invocations."""
    protocol_out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # everything the function prints goes to stderr (the runner's log)
    sys.stdout = sys.stderr
    sys.path[:0] = [code_dir, *package_dirs]
    try:
        function = _load_handler(handler)
    except Exception as exception:  # Init failed: this environment ends, the next invocation starts another
        protocol_out.write(json.dumps({"ready": False, "error": _error(exception)}) + "\n")
        print(f"[ERROR] {type(exception).__name__}: {exception}", file=sys.stderr)
        traceback.print_exception(exception, file=sys.stderr)
        return 1
    protocol_out.write(json.dumps({"ready": True, "error": None}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        context = LambdaContext(request["id"], int(request["deadline_ms"]), request.get("function_arn", ""))
        try:
            result = function(request["event"], context)
            json.dumps(result)  # a result Lambda could not serialise is an error
            reply: dict[str, Any] = {"id": request["id"], "result": result}
        except Exception as exception:
            reply = {"id": request["id"], "error": _error(exception)}
            # What the Lambda Python runtime writes to the function's log on an unhandled error.
            print(f"[ERROR] {type(exception).__name__}: {exception}", file=sys.stderr)
            traceback.print_exception(exception, file=sys.stderr)
        sys.stderr.flush()
        protocol_out.write(json.dumps(reply) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if len(arguments) < 2:
        print("usage: python -I -S lambda_bootstrap.py <code dir> <handler> [<import dir> ...]", file=sys.stderr)
        return 2
    return serve(arguments[0], arguments[1], arguments[2:])


if __name__ == "__main__":
    sys.exit(main())
