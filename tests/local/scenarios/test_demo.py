"""When the demo takes the pipeline for drained: every checkpoint at its stream's end, nothing in flight."""

from typing import Any

from local.scenarios.demo import is_drained


def stats(*, in_flight: int = 0, pending: int = 0, caught_up_at: float = 20.0, last_invocation_at: float = 10.0) -> Any:
    return {
        "last_invocation_at": last_invocation_at,
        "functions": {"state": {"in_flight": in_flight}, "map": {"in_flight": 0}},
        "shards": [
            {"records_pending": 0, "caught_up_at": 30.0},
            {"records_pending": pending, "caught_up_at": caught_up_at},
        ],
    }


def test_drained_when_every_shard_read_nothing_after_the_last_invocation_ended() -> None:
    assert is_drained(stats())


def test_not_drained_while_an_invocation_runs_or_records_wait() -> None:
    assert not is_drained(stats(in_flight=1))
    assert not is_drained(stats(pending=3, caught_up_at=0.0))


def test_not_drained_until_a_read_after_the_last_invocation_found_nothing() -> None:
    """An invocation that ended after a shard's last empty read may have written to it."""
    assert not is_drained(stats(caught_up_at=9.0))
    assert not is_drained(stats(caught_up_at=0.0, last_invocation_at=0.0)), "never caught up"


def test_not_drained_until_a_read_after_the_last_send_found_nothing() -> None:
    """A read that started before the producer's last put may have missed its records."""
    assert not is_drained(stats(), since=25.0), "one shard's last empty read started at 20"
    assert is_drained(stats(caught_up_at=25.0), since=25.0)


def test_not_drained_before_the_runner_reports_a_shard() -> None:
    assert not is_drained({"functions": {}, "shards": [], "last_invocation_at": 0})
