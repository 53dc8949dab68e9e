"""Which DynamoDB stream records the delta consumers (reduce, archive) act on: INSERTs only.

Their mappings already filter on the new image's key (`stacks.stages.new_items_filter`), which
Lambda documents for DynamoDB streams; a MODIFY would still pass that filter. A delta item is
written once and never modified, so anything but an INSERT is not a new delta: applying or
archiving it would count a batch twice. The handlers skip such records and count them in the
`NonInsertRecordsSkipped` metric (`aggregation.names`), which an alarm watches.
"""

from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord


def is_insert(record: DynamoDBRecord) -> bool:
    """Whether the record is the creation of an item (the only change a new delta makes).

    Reads the raw `eventName`: Powertools' `event_name` raises on a name it does not know.
    """
    return bool(record.get("eventName") == "INSERT")
