"""With `--aggregate`, a conflicting duplicate goes under the partition key of the record that carried
its original (`producer.sender.Carriers`): Lambda keeps order per Kinesis partition key, and an aggregate
travels under its first message's. The pipeline's side: tests/lambdas/state_function/test_aggregated_conflict_order.py.
"""

from __future__ import annotations

from aggregation.kpl import user_records as kpl_user_records
from producer.generator import GeneratorConfig, MessageKind, generate_messages
from producer.kpl import ShardMap
from producer.sender import Carriers, pack

SHARD_STARTS = (0, 2**127)


def test_a_conflict_is_packed_alone_under_the_key_of_the_record_that_carried_its_version() -> None:
    messages = list(generate_messages(GeneratorConfig(seed=3, count=2000, conflicting_pct=3)))
    shards = ShardMap(list(SHARD_STARTS))
    conflicts = [m for m in messages if m.kind is MessageKind.CONFLICTING_DUPLICATE]
    assert len(conflicts) > 20
    moved = 0
    for conflict in conflicts:
        assert conflict.state is not None
        before = messages[: messages.index(conflict)]
        sent = pack([m for m in before if m.kind is not MessageKind.CONFLICTING_DUPLICATE], shards)
        carriers = Carriers()
        carriers.accepted(sent)
        carrier = next(
            record.partition_key
            for record in sent
            for m in record.messages
            if m.trade_id == conflict.trade_id and m.state is not None and m.state.version == conflict.state.version
        )
        (record,) = pack([conflict], shards, route=carriers.route)
        assert record.partition_key == carrier
        assert record.messages == (conflict,)
        assert [user.data for user in kpl_user_records(record.data)] == [conflict.data]
        assert [user.partition_key for user in kpl_user_records(record.data)] == [conflict.partition_key]
        moved += record.partition_key != conflict.partition_key
    assert moved, "some conflicts travel under another trade's key, as their originals did"
    assert all(carriers.route(m) is None for m in messages if m.kind is not MessageKind.CONFLICTING_DUPLICATE)
    assert Carriers().route(conflicts[0]) is None, "no record of this run carried its version: packed like any message"
