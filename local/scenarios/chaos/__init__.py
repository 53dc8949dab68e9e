"""`make chaos`: every failure the pipeline must survive at once, the figures, and a negative control that must fail.

One run = a fresh local runtime (`lifecycle.up`) with, all at the same time:

- function faults (`FAILURE_*_PCT`, docs/design.md) before and after the write, in every stage,
  at several times the original demo's rates;
- AWS-side faults the emulator injects (`local.emulator.injected_faults`): the response of an applied
  write lost at every DynamoDB write site (state `BatchExecuteStatement`: HTTP 500; map `PutItem`:
  connection closed; reduce `TransactWriteItems`: held past the SDK's read timeout), with the
  SDK's own retries active; the answers of single statements of PartiQL batches
  (`BatchExecuteStatement`) on the StateTable lost (applied, answered with a per-statement
  `InternalServerError`) or those statements refused (a per-statement throttling error) while
  the rest of the batch is applied; throttling of reads and writes (DynamoDB, DynamoDB Streams,
  Kinesis);
- a cancelled reduce transaction's ClientRequestToken kept taken by the emulator (a retry with
  other parameters would be refused: `cancelled_token_kept`), with throttled transactions
  cancelled for it to bite on;
- failed map, reduce and archive batches re-delivered in other boundaries by the runner: grown,
  shrunk or shifted back (`local.runner.redelivery`), as Lambda does not promise identical retries;
- the response of every S3 PutObject of the archive lost ten times as often, at most 25 %
  (its batch objects and their receipts: two requests an invocation, far fewer than the other
  sites'; connection closed): the SDK's resend of a conditional PUT gets 412;
- the runner SIGKILLed mid-batch (its whole process group: the runner and the functions'
  workers, found from the pid `up` recorded, never by name) and restarted from its checkpoints;
- bad input from the producer: duplicates, out-of-order versions, malformed records of every
  kind (non-UTF-8, numbers beyond 38 digits, ~1 MB records...), conflicting duplicates.

Then the faults are cleared, the aggregates are compared exactly with the producer's ledger
(`producer.verify_pipeline`), the quarantine table is counted and `python -m audit reconcile`
checks the S3 archive. The control repeats the run with the reduce function in
`REDUCE_IDEMPOTENCY=unsafe-add` (plain ADD, no token, no marker): the verifier must catch the
over-count, or the chaos suite proves nothing. Exit 0 only when the real run is exact, the
archive agrees, and the control is caught.
"""

from __future__ import annotations

from local.scenarios.chaos.figures import (
    KEPT_TOKENS_FIGURE,
    LOST_STATEMENTS_FIGURE,
    THROTTLED_STATEMENTS_FIGURE,
    RunFigures,
    add_function_counters,
    discrepancies,
    emulator_fault_figures,
    peak_invocations,
    records_processed,
    stage_of,
)
from local.scenarios.chaos.report import control_caught, figures_table, quarantine_matches, run_passed
from local.scenarios.chaos.run import run_chaos, run_pipeline
from local.scenarios.chaos.settings import (
    ORIGINAL_FUNCTION_FAULT_PCT,
    STAGES,
    ChaosError,
    ChaosSettings,
    archive_lost_response_pct,
    emulator_fault_config,
)

__all__ = [
    "KEPT_TOKENS_FIGURE",
    "LOST_STATEMENTS_FIGURE",
    "ORIGINAL_FUNCTION_FAULT_PCT",
    "STAGES",
    "THROTTLED_STATEMENTS_FIGURE",
    "ChaosError",
    "ChaosSettings",
    "RunFigures",
    "add_function_counters",
    "archive_lost_response_pct",
    "control_caught",
    "discrepancies",
    "emulator_fault_config",
    "emulator_fault_figures",
    "figures_table",
    "peak_invocations",
    "quarantine_matches",
    "records_processed",
    "run_chaos",
    "run_passed",
    "run_pipeline",
    "stage_of",
]
