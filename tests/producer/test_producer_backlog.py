"""`producer send` warns, once, when the pipeline falls behind what it sends (`producer.watch.BacklogCheck`)."""

from __future__ import annotations

import time

from hypothesis import given
from hypothesis import strategies as st

from producer.sender import SendOptions
from producer.watch import FALLING_BEHIND_SECONDS, FALLING_BEHIND_WINDOW_SECONDS, BacklogCheck, Figures, PipelineWatch

SHARE = 0.8


def run(send_rate: float, applied_share_of_sent: float, seconds: int, check: BacklogCheck) -> list[str]:
    """One sample a second of a steady send and a steady pipeline; the warnings it gave."""
    warnings = []
    for second in range(seconds + 1):
        sent = int(send_rate * second)
        warning = check.observe(sent, int(sent * applied_share_of_sent), float(second))
        if warning is not None:
            warnings.append(warning)
    return warnings


@given(
    send_rate=st.floats(min_value=5, max_value=50_000),
    keeping_up=st.floats(min_value=0.75, max_value=1.0),
    share_estimate_off_by=st.floats(min_value=-0.04, max_value=0.04),
)
def test_a_pipeline_that_keeps_up_is_never_warned_about(
    send_rate: float, keeping_up: float, share_estimate_off_by: float
) -> None:
    """It applies most of what changes a trade, whatever the rate, and the share's estimate a little off."""
    check = BacklogCheck(applying_share=SHARE + share_estimate_off_by)
    assert run(send_rate, SHARE * keeping_up, 120, check) == []


@given(send_rate=st.floats(min_value=20, max_value=50_000), falling_behind=st.floats(min_value=0.0, max_value=0.5))
def test_a_pipeline_that_falls_behind_is_warned_about_once(send_rate: float, falling_behind: float) -> None:
    check = BacklogCheck(applying_share=SHARE)
    warnings = run(send_rate, SHARE * falling_behind, 120, check)
    assert len(warnings) == 1 and "falling behind" in warnings[0] and "lower --rate" in warnings[0]


def test_the_warning_waits_for_a_whole_window_and_the_hold() -> None:
    """A slow start (the first batches' latency) or a short stall is no backlog."""
    check = BacklogCheck(applying_share=SHARE)
    late = int(FALLING_BEHIND_WINDOW_SECONDS + FALLING_BEHIND_SECONDS)
    assert run(100, 0.0, late - 1, check) == []
    assert len(run(100, 0.0, late + 1, BacklogCheck(applying_share=SHARE))) == 1


def test_the_share_that_changes_a_trade_follows_the_producer_s_options() -> None:
    assert SendOptions().applying_share == 1 - (10 + 5 + 1) / 100
    assert SendOptions(duplicates_pct=60, out_of_order_pct=30, malformed_pct=20).applying_share == 0


class SlowPipeline:
    """A `PipelineReader` of a pipeline that applied nothing (no AWS: the figures are the test's)."""

    interval = 0.01
    settle = 1.0

    def sample(self) -> Figures:
        return Figures(applied=0, rate=None, p50_ms=None, p99_ms=None, max_ms=None)

    def summary(self) -> Figures:
        return self.sample()


def test_a_watch_following_the_sending_hands_the_warning_to_one_display_once() -> None:
    sent = [0]
    check = BacklogCheck(applying_share=SHARE, hold_seconds=0.05, window_seconds=0.05)
    watch = PipelineWatch(SlowPipeline(), check)
    watch.follow_sending(lambda: sent[0])
    watch.start()
    try:
        warning = None
        for _ in range(500):
            sent[0] += 50
            if (warning := watch.take_warning()) is not None:
                break
            time.sleep(0.01)
        assert warning is not None and "falling behind" in warning
        assert watch.take_warning() is None
    finally:
        watch.stop()
