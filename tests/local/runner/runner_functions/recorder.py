"""A purpose-built Lambda handler for the runner tests: records every invocation, misbehaves on cue.

Every invocation appends one JSON line to `$RECORD_LOG` (pid, eventIDs, the whole event)
*before* deciding how to end, so a test can see each delivery, including failed ones.
Behaviour, from the function's environment (set in the test's template):

- `FAIL_FIRST_N`: the first N invocations raise.
- `SLEEP_SECONDS`: every invocation sleeps this long (to be caught mid-batch).
- `SLEEP_FIRST_N_SECONDS` + `SLEEP_FIRST_N`: only the first N invocations sleep (timeouts).
- `FAIL_ITEMS_CONTAINING`: report records whose data contains this text as batchItemFailures
  on the first invocation that sees them.
- `PUT_ITEM_TABLE`: an invocation with Kinesis records puts one item (its first eventID) into
  this table, as a stage writes what the next one reads.
"""

import base64
import json
import os
import time
from typing import Any

LOG = os.environ["RECORD_LOG"]
COLD_START_PID = os.getpid()


def _previous_invocations() -> int:
    try:
        with open(LOG) as log:
            return sum(1 for _ in log)
    except FileNotFoundError:
        return 0


def handler(event: dict[str, Any], context: Any) -> Any:
    number = _previous_invocations()
    print(f"recorder invocation {number}")  # stdout is the function's log, never the runner's protocol
    with open(LOG, "a") as log:
        log.write(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "ids": [record["eventID"] for record in event["Records"]],
                    "event": event,
                    "function": context.function_name,
                    "remaining_ms": context.get_remaining_time_in_millis(),
                    "env": {k: v for k, v in os.environ.items() if k.startswith(("FAILURE_", "AWS_ENDPOINT"))},
                }
            )
            + "\n"
        )
    table = os.environ.get("PUT_ITEM_TABLE")
    if table and event["Records"] and event["Records"][0]["eventSource"] == "aws:kinesis":
        import boto3  # noqa: PLC0415 (only this behaviour needs it)

        boto3.client("dynamodb").put_item(TableName=table, Item={"pk": {"S": event["Records"][0]["eventID"]}})
    if number < int(os.environ.get("SLEEP_FIRST_N", "0")):
        time.sleep(float(os.environ["SLEEP_FIRST_N_SECONDS"]))
    time.sleep(float(os.environ.get("SLEEP_SECONDS", "0")))
    if number < int(os.environ.get("FAIL_FIRST_N", "0")):
        raise RuntimeError(f"injected failure of invocation {number}")
    marker = os.environ.get("FAIL_ITEMS_CONTAINING")
    if marker:
        failed = [
            {"itemIdentifier": record["kinesis"]["sequenceNumber"]}
            for record in event["Records"]
            if marker in base64.b64decode(record["kinesis"]["data"]).decode()
        ]
        if failed and number == 0:
            return {"batchItemFailures": failed}
    return {"batchItemFailures": []}
