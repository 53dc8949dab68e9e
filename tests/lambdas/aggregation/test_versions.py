"""The version cache: only seen versions, only ever higher, bounded, least recently used evicted."""

import sys
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aggregation.messages import VERSION_LIMIT
from aggregation.versions import StoredVersion, VersionCache, pack_stored_version, settles, unpack_stored_version


def stored(version: int, digest: str = "d", writer: str = "e") -> StoredVersion:
    return StoredVersion(version=version, content_digest=digest, written_by=writer)


def test_a_version_settles_messages_up_to_it_and_never_above() -> None:
    cache = VersionCache(10)
    cache.remember("t", stored(5))
    assert settles(cache.get("t"), 4), "stale: its condition would fail"
    assert settles(cache.get("t"), 5), "same version: a duplicate (or a conflict, by digest)"
    assert not settles(cache.get("t"), 6), "a newer version is always written"
    assert not settles(cache.get("unknown"), 0), "nothing known: written"


def test_a_lower_version_never_replaces_a_higher_one() -> None:
    cache = VersionCache(10)
    cache.remember("t", stored(5, "five"))
    cache.remember("t", stored(3, "three"))  # e.g. a failed condition answered before a later write
    assert cache.get("t") == stored(5, "five")
    cache.remember("t", stored(5, "other"))  # the same version seen again keeps what was seen first
    assert cache.get("t") == stored(5, "five")
    cache.remember("t", stored(7, "seven"))
    assert cache.get("t") == stored(7, "seven")


def test_the_least_recently_used_trade_is_evicted_beyond_capacity() -> None:
    cache = VersionCache(2)
    cache.remember("a", stored(1))
    cache.remember("b", stored(1))
    assert cache.get("a") is not None  # a is now the most recently used
    cache.remember("c", stored(1))
    assert len(cache) == 2
    assert cache.get("b") is None, "b was the least recently used"
    assert cache.get("a") is not None and cache.get("c") is not None
    # An evicted trade is simply written again: nothing settles it any more.
    assert not settles(cache.get("b"), 0)


def test_capacity_zero_remembers_nothing() -> None:
    cache = VersionCache(0)
    cache.remember("t", stored(5))
    assert len(cache) == 0 and not settles(cache.get("t"), 1)
    with pytest.raises(ValueError, match="0 or more"):
        VersionCache(-1)


@pytest.mark.parametrize(("capacity", "kept"), [(60, 60), (10, 10)])
def test_concurrent_writers_keep_the_highest_version_and_the_bound(capacity: int, kept: int) -> None:
    cache = VersionCache(capacity)

    def remember(offset: int) -> None:
        for version in range(offset, 400, 4):
            for trade in range(60):
                cache.remember(f"t{trade}", stored(version, f"v{version}"))

    threads = [threading.Thread(target=remember, args=(offset,)) for offset in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(cache) == kept
    if capacity >= 60:  # nothing evicted: every trade ends at the highest version any thread saw
        assert {cache.get(f"t{trade}") for trade in range(60)} == {stored(399, "v399")}


@given(
    version=st.integers(min_value=0, max_value=VERSION_LIMIT - 1),
    digest=st.text() | st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
    writer=st.none() | st.text(),
)
def test_an_entry_is_kept_packed_and_read_back_exactly(version: int, digest: str, writer: str | None) -> None:
    """Every version a message may carry, any digest (a SHA-256 hex one packed as its bytes), any writer or none."""
    stored_version = StoredVersion(version=version, content_digest=digest, written_by=writer)
    assert unpack_stored_version(pack_stored_version(stored_version)) == stored_version
    cache = VersionCache(1)
    cache.remember("t", stored_version)
    assert cache.get("t") == stored_version


def test_a_packed_entry_is_smaller_than_the_stored_version_it_stands_for() -> None:
    """The point of packing: one bytes object instead of a dataclass and two strings."""
    stored_version = stored(
        3, "ab" * 32, "shardId-000000000000:49590338271490256608559692538361571095921575989136588898"
    )
    unpacked = sum(map(sys.getsizeof, (stored_version, stored_version.content_digest, stored_version.written_by)))
    assert sys.getsizeof(pack_stored_version(stored_version)) < 0.6 * unpacked
