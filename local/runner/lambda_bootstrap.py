"""The worker of a local Lambda execution environment: Lambda's runtime interface, in one file.

Run by path, never as a module of this repository, by an interpreter started with ``-I -S``
(`execution_environment.ExecutionEnvironment`): isolated from ``PYTHON*`` variables and the
user's site, and without `site`, so no site-packages of the development environment is on
`sys.path`. This file imports the standard library only; it then puts, in front of the
standard library, what a function on Lambda imports from (`lambda_packages`): its deployment
package, its layers, the runtime's SDK. Whatever a handler imports from anywhere else fails
here as it would on Lambda.

Protocol (JSON lines): the parent writes ``{"id": ..., "event": ..., "deadline_ms": ...}``
to the worker's stdin; the worker answers ``{"id": ..., "result": ...}`` or
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

    def __init__(self, request_id: str, deadline_ms: int) -> None:
        self.function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "local")
        self.function_version = os.environ.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        self.invoked_function_arn = os.environ.get("LOCAL_FUNCTION_ARN", "")
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
        init_error: dict[str, Any] | None = None
    except Exception as exception:  # an init error fails every invocation, as in Lambda
        init_error = _error(exception)
    protocol_out.write(json.dumps({"ready": init_error is None, "error": init_error}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        if init_error is not None:
            reply: dict[str, Any] = {"id": request["id"], "error": init_error}
        else:
            context = LambdaContext(request["id"], int(request["deadline_ms"]))
            try:
                result = function(request["event"], context)
                json.dumps(result)  # a result Lambda could not serialise is an error
                reply = {"id": request["id"], "result": result}
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
