"""How the state function resends statements DynamoDB answered "not now" (a throttling code).

The SDK has already retried each call's own throttling; these are the statements of a
`BatchExecuteStatement` answered one by one with a throttling error while the call succeeded.
Each is sent again after a jittered pause, at most `MAX_RESENDS` times in a row; then the batch
fails and Lambda retries it. Counted per statement, never per round: one statement's bad luck
must not be charged to the others sent beside it.
"""

import random

MAX_RESENDS = 5
"""Times in a row one statement may be answered with a throttling code before the batch fails."""
FIRST_RESEND_PAUSE_SECONDS = 0.05
MAX_RESEND_PAUSE_SECONDS = 1.0


def resend_pause(resend: int) -> float:
    """Seconds to wait before the `resend`-th resend of throttled statements: full jitter on an
    exponential backoff, so writers throttled together do not come back together."""
    return random.uniform(0, min(MAX_RESEND_PAUSE_SECONDS, FIRST_RESEND_PAUSE_SECONDS * 2**resend))
