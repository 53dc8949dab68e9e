"""py-spy's raw output summarised per process: the tool behind the profiles in docs/benchmarks.md."""

from benchmarks.profile_summary import render, summarise

RUNNER = 'process 10:"/v/bin/python -m local.runner --state-dir /tmp/s"'
STATE = 'process 11:"/v/bin/python -m local.runner.execution_environment /f state_function.handler.lambda_handler"'
POLLER = "<module> (runpy.py:88);run (/w/local/runner/pollers.py:600)"
RAW = [
    f"{RUNNER};{POLLER};_read_more (/w/local/runner/pollers.py:260) 6",
    f"{RUNNER};{POLLER};_commit (/w/local/runner/pollers.py:420) 2",
    f"{RUNNER};{STATE};main (/w/local/runner/execution_environment.py:90);"
    "update_item (/v/lib/python3.11/site-packages/botocore/client.py:606) 3",
    f"{RUNNER};{STATE};main (/w/local/runner/execution_environment.py:90) 1",
]


def test_stacks_count_for_their_innermost_process_with_self_and_inclusive_shares() -> None:
    runner, state = summarise(RAW)
    assert (runner.name, runner.samples, state.name, state.samples) == ("runner", 8, "state_function", 4)
    assert runner.self_frames == [
        ("_read_more (local/runner/pollers.py)", 6),
        ("_commit (local/runner/pollers.py)", 2),
    ]
    assert runner.inclusive_frames == runner.self_frames, "below the root, these two divide the time"
    assert "run (local/runner/pollers.py)" not in dict(runner.inclusive_frames), "on every sample: a root"
    assert state.self_frames[0] == ("update_item (botocore/client.py)", 3)
    page = render([runner, state])
    read_more = "75.0% | `_read_more (local/runner/pollers.py)`"
    assert f"| {read_more} | | {read_more} |" in page
