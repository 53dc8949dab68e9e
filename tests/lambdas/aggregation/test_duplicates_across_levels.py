"""A duplicate stays a duplicate across any accepted change of `hierarchyLevels` (issue 32, item 5).

The property runs the state function's own pieces: the message parsed under the levels of the
write, the item the writer builds from it (or the one the first releases wrote: no NodePath),
read back under the levels of any change the settings guard accepts, directly and through the
version cache's packing, and the message sent again parsed under those levels.
"""

import json
from decimal import Decimal
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from aggregation.batches import is_conflicting_duplicate, stored_content_digest
from aggregation.exact import dynamodb_number
from aggregation.hierarchy import hierarchy_levels_violation
from aggregation.messages import TradeMessage, parse_trade_message
from aggregation.names import TOKEN_AND_MARKERS, TRADE_TIMESTAMP
from aggregation.setting_changes import StateSettings, change_refusal
from aggregation.state_statements import ASSIGNED, state_write_values
from aggregation.value_domain import DEFAULT_VALUE_DOMAIN
from aggregation.versions import StoredVersion, pack_stored_version, unpack_stored_version

NAMES = ("RiskType", "TradeDesk", "Region", "Book", "Desk 2", "ü")
LEVEL_VALUES = st.text(st.characters(categories=("L", "N", "Zs", "P"), exclude_characters=":"), min_size=1, max_size=6)
VALUES = st.decimals(min_value=-(10**6), max_value=10**6, places=4)


def settings(levels: tuple[str, ...]) -> StateSettings:
    return StateSettings(levels, DEFAULT_VALUE_DOMAIN, marker_ttl_days=7, reduce_idempotency=TOKEN_AND_MARKERS)


level_lists = st.lists(st.sampled_from(NAMES), min_size=1, unique=True).map(tuple)


def document(value: Decimal, hierarchy: dict[str, str]) -> bytes:
    """A message of trade "t" Version 7 holding every level of `NAMES`, configured or not."""
    fields = {"TradeID": "t", "Version": 7, "Value": "VALUE", "Timestamp": 1.5, "Hierarchy": hierarchy}
    return json.dumps(fields).replace('"VALUE"', str(value)).encode()


def written_item(message: TradeMessage, levels: tuple[str, ...], release: str) -> dict[str, Any]:
    """The StateTable item writing `message` under `levels` left, as DynamoDB returns it (ALL_OLD).

    `today`: the statement parameters the state function sends. `stop-17`: what the first releases
    wrote (no NodePath, the digest of the levels then, the number as boto3's serializer writes it).
    """
    if release == "today":
        write = state_write_values(message, "shard:1", levels)
        return {"TradeID": write.key, **dict(zip((*ASSIGNED, TRADE_TIMESTAMP), write.assigned, strict=True))}
    return {
        "TradeID": {"S": message.trade_id},
        "Version": {"N": str(message.version)},
        "Value": {"N": str(dynamodb_number(message.value))},
        "Hierarchy": {"M": {level: {"S": name} for level, name in zip(levels, message.hierarchy, strict=True)}},
        "ContentDigest": {"S": message.content_digest},
        "WrittenByEventId": {"S": "shard:1"},
    }


def applied_digests(item: dict[str, Any], levels: tuple[str, ...]) -> list[str | None]:
    """The digest the conflict check meets: from the stored item, and from the version cache that remembered it."""
    digest = stored_content_digest(item, levels)
    remembered = unpack_stored_version(pack_stored_version(StoredVersion(7, digest, "shard:1")))
    return [digest, remembered.content_digest]


@given(
    before=level_lists,
    after=level_lists,
    value=VALUES,
    hierarchy=st.fixed_dictionaries({name: LEVEL_VALUES for name in NAMES}),
    release=st.sampled_from(["today", "stop-17"]),
    changed=st.sampled_from(NAMES),
    other=LEVEL_VALUES,
)
def test_a_message_sent_again_after_a_level_change_is_a_duplicate_exactly_when_its_content_is_the_same(
    *,
    before: tuple[str, ...],
    after: tuple[str, ...],
    value: Decimal,
    hierarchy: dict[str, str],
    release: str,
    changed: str,
    other: str,
) -> None:
    assert hierarchy_levels_violation(after) is None
    assert change_refusal(settings(before), settings(after)) is None, "the guard accepts every change of levels"
    original = document(value, hierarchy)
    item = written_item(parse_trade_message(original, before), before, release)

    resent = parse_trade_message(original, after)
    assert [is_conflicting_duplicate(resent, digest) for digest in applied_digests(item, after)] == [False, False]

    other_value = parse_trade_message(document(value + 1, hierarchy), after)
    assert [is_conflicting_duplicate(other_value, digest) for digest in applied_digests(item, after)] == [True, True]

    if hierarchy[changed] != other:
        other_level = parse_trade_message(document(value, {**hierarchy, changed: other}), after)
        compared = changed in before and changed in after  # a value stored then, and configured now
        conflicts = [is_conflicting_duplicate(other_level, digest) for digest in applied_digests(item, after)]
        assert conflicts == [compared, compared]


@given(levels=level_lists, value=VALUES, hierarchy=st.fixed_dictionaries({name: LEVEL_VALUES for name in NAMES}))
def test_without_a_level_change_the_stored_item_reads_as_the_digest_it_stores(
    levels: tuple[str, ...], value: Decimal, hierarchy: dict[str, str]
) -> None:
    """Until the levels change, the stored content's digest is the message's own, the ContentDigest written."""
    message = parse_trade_message(document(value, hierarchy), levels)
    item = written_item(message, levels, "today")
    assert stored_content_digest(item, levels) == item["ContentDigest"]["S"] == message.content_digest
    assert stored_content_digest(written_item(message, levels, "stop-17"), levels) == message.content_digest
