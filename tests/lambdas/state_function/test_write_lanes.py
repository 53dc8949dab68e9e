"""The state function's bounded write lanes (`WriteLanes`): every write once, results in order,
never more in flight than the lanes, and a failure stops the batch with the earliest failed write."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from state_function.handler import WriteLanes

POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="test-lanes")


class InFlight:
    """Counts calls of `work` running at once; each holds its slot briefly so that lanes overlap."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.calls: list[int] = []

    def __call__(self, item: int) -> int:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.calls.append(item)
        time.sleep(0.0005)
        with self.lock:
            self.now -= 1
        return item * 2


@settings(max_examples=40)
@given(st.lists(st.integers(), max_size=60), st.integers(1, 8))
def test_every_item_is_worked_once_in_order_and_never_more_than_the_lanes_at_once(items: list[int], lanes: int) -> None:
    work = InFlight()
    assert WriteLanes(POOL, lanes).run(items, work) == [item * 2 for item in items]
    assert sorted(work.calls) == sorted(items)
    assert work.most <= lanes


def test_enough_items_use_every_lane() -> None:
    """The writes overlap: the first four items wait for each other, which only four lanes at once can do
    (with fewer, the barrier times out and the test fails)."""
    meeting = threading.Barrier(4)

    def work(item: int) -> int:
        if item < 4:
            meeting.wait(timeout=10)
        return item

    assert WriteLanes(POOL, 4).run(list(range(50)), work) == list(range(50))


class Failing(Exception):
    pass


def test_after_a_failure_no_lane_takes_another_item() -> None:
    taken: list[int] = []

    def work(item: int) -> int:
        taken.append(item)
        if item == 3:
            raise Failing(item)
        return item

    with pytest.raises(Failing):
        WriteLanes(POOL, 1).run(list(range(10)), work)
    assert taken == [0, 1, 2, 3]


def test_the_earliest_failed_item_is_raised_once_every_lane_has_stopped() -> None:
    finished: list[int] = []

    def work(item: int) -> int:
        if item in (2, 5):
            time.sleep(0.01 if item == 2 else 0)  # the later item fails first
            raise Failing(item)
        time.sleep(0.005)
        finished.append(item)
        return item

    with pytest.raises(Failing) as raised:
        WriteLanes(POOL, 6).run(list(range(6)), work)
    assert raised.value.args == (2,)
    assert sorted(finished) == [0, 1, 3, 4]  # the lanes already writing finished before the raise
