"""The names that parts deployed or run separately must spell alike, each written once.

Every name here is a contract between two sides that never call each other: the stack's
alarms and the functions' metrics, the bucket policy and the archive's keys, the reduce
stage's markers and `audit rebuild`, the settings and the reduce handler's modes, the
AggregateTable's writer and its readers (frontend, audit, benchmarks), the tables' keys in
the stack and the items the functions write. A name spelt twice
can drift apart without any test noticing; imported from here, it cannot. Plain constants and
one formatting function, no imports, so the CDK app, the
functions and the operator tools all import it.

The producer's ledger and verifier spell their own names on purpose: they are the
independent ground truth the pipeline is checked against (docs/design.md).
"""

from typing import Final

# -- AggregateTable: bookkeeping items beside the hierarchy nodes --

BOOKKEEPING_PREFIX: Final = "#"
"""Keys starting with this are bookkeeping, never hierarchy nodes."""

STATS_KEY: Final = f"{BOOKKEEPING_PREFIX}stats"
"""The reduce stage's running figures (`MessagesApplied`, `LastUpdated`, latency)."""

NODE_PREFIX: Final = "node#"
SLICE_SEPARATOR: Final = "#"
"""A node slice's key is `node#<slice>#<path key>` (`aggregation.aggregate_items`)."""

MAX_NODE_PREFIX_BYTES: Final = len(NODE_PREFIX) + len("9999") + len(SLICE_SEPARATOR)
"""The most a node's path key grows by in the table (slices below 10,000): the deepest path
plus this still fits DynamoDB's 2,048-byte partition key (`aggregation.hierarchy`)."""

MARKER_PREFIX: Final = f"{BOOKKEEPING_PREFIX}applied#"
"""Key prefix of the reduce stage's idempotency markers: `#applied#<marker id>`."""


def marker_id(batch_hash: str, node_group: int, node_groups: int, slice_index: int) -> str:
    """The id of one delta unit: `<batch hash>/<group>of<groups>/<slice>`.

    A function of the delta item alone (never of the batch it was delivered in), so a replay
    in any boundaries finds the same markers; `audit rebuild` recreates them with it.
    """
    return f"{batch_hash}/{node_group}of{node_groups}/{slice_index}"


def batch_hash_of_marker(marker_key: str) -> str:
    """The delta item's `BatchHash` in a marker's key (`#applied#<batch hash>/...`)."""
    return marker_key.removeprefix(MARKER_PREFIX).split("/", 1)[0]


# -- Table attributes: the stack's keys and TTLs, the functions' writes, the readers' reads --
# (The DeltaTable's are the delta item codec's, `aggregation.delta_items`.)

EXPIRES_AT: Final = "ExpiresAt"
"""The TTL attribute of the DeltaTable's items and of the AggregateTable's markers (epoch seconds)."""

# AggregateTable: written by the reduce stage (and `audit rebuild`); read by the frontend,
# `audit`, the benchmarks and the local runtime.
AGGREGATE_KEY: Final = "AggregateKey"
"""The partition key: a node's hierarchy path, or a bookkeeping key (`#...`)."""

NODE_VALUE: Final = "Value"
NODE_TRADE_COUNT: Final = "TradeCount"
"""A node's exact total and trade count (a delta item's `Deltas` map spells a node's change alike)."""

MESSAGES_APPLIED: Final = "MessagesApplied"
LAST_UPDATED: Final = "LastUpdated"
LAST_LATENCY_MEAN_SECONDS: Final = "LastLatencyMeanSeconds"
LAST_LATENCY_MAX_SECONDS: Final = "LastLatencyMaxSeconds"
"""The `#stats` item's figures."""

# StateTable: written by the state function, read from its stream by the map function.
TRADE_ID: Final = "TradeID"
"""The partition key: one item per trade."""

TRADE_VALUE: Final = "Value"
TRADE_HIERARCHY: Final = "Hierarchy"
TRADE_TIMESTAMP: Final = "Timestamp"
"""The trade's state the map function sums (and the producer timestamp it carries on)."""

TRADE_NODE_PATH: Final = "NodePath"
"""The trade's hierarchy values in the level order configured when its version was written (L of S):
the map function adds and later subtracts the trade at exactly these nodes, whatever the levels
are by then (`aggregation.deltas.image_node_path`)."""

# QuarantineTable: written by the state function; the chaos suite's figures read it.
QUARANTINE_RECORD_ID: Final = "RecordId"
"""The partition key: the Kinesis record's event id."""

QUARANTINE_REASON: Final = "Reason"
QUARANTINE_TEXT_PAYLOAD: Final = "Payload"
QUARANTINE_BINARY_PAYLOAD: Final = "PayloadBinary"
QUARANTINE_PAYLOAD_TRUNCATED: Final = "PayloadTruncated"
"""Why the record is there, and the record as text or else as bytes, cut if it would not fit."""

CONFLICT_REASON_PREFIX: Final = "conflicting duplicate"
"""How the `Reason` of a conflicting duplicate starts (the chaos figures count them by it)."""


# -- Stack outputs: the stack declares them, the operator tools and the local deployer read them --

STREAM_OUTPUT: Final = "StreamName"
STATE_TABLE_OUTPUT: Final = "StateTableName"
DELTA_TABLE_OUTPUT: Final = "DeltaTableName"
AGGREGATE_TABLE_OUTPUT: Final = "AggregateTableName"
QUARANTINE_TABLE_OUTPUT: Final = "QuarantineTableName"
ARCHIVE_BUCKET_OUTPUT: Final = "ArchiveBucketName"
ALARM_TOPIC_OUTPUT: Final = "AlarmTopicArn"
"""CloudFormation output keys (logical IDs pinned by the stack): what a client looks the pipeline up by."""

DASHBOARD_URL_OUTPUT: Final = "DashboardUrl"
"""The CloudWatch dashboard's console URL: `producer send` prints it against a deployed stack (it
is not in the local runtime's `outputs.json`: there is no console there)."""
METRICS_NAMESPACE_OUTPUT: Final = "MetricsNamespace"
"""The namespace the stack's functions emit their metrics under (`stack_metrics_namespace`):
`producer send` reads its figures there on AWS (not in `outputs.json` either: nothing local reads
CloudWatch)."""


# -- Archive bucket layout (the bucket policy's prefixes are the function's keys) --

DELTA_PREFIX: Final = "deltas/"
"""Batch objects ``deltas/<hh>/<object id>.batch.json`` (and the per-item objects of earlier releases)."""
METASTORE_PREFIX: Final = "metastore/"
RECEIPT_PREFIX: Final = f"{METASTORE_PREFIX}receipts/"
"""The registry: one receipt per batch object, ``metastore/receipts/<hh>/<object id>.json``."""
LEGACY_REGISTRY_KEY: Final = f"{METASTORE_PREFIX}registry.json"
"""The single counting registry of releases before it was sharded; read, never written."""
REGISTRY_SHARD_PREFIX: Final = f"{METASTORE_PREFIX}registry/"
"""The counting registry's shards of earlier releases, ``metastore/registry/<k>.json``; read, never written."""
REGISTRY_KEYS_PREFIX: Final = f"{METASTORE_PREFIX}registry"
"""What every key of the earlier releases' counting registry starts with (listing)."""

# -- Metrics: what the functions emit and the stack's alarms watch --

LEGACY_METRICS_NAMESPACE: Final = "ExactlyOnceAggregation"
"""The one namespace every stack's functions shared before each stack had its own: a stack deployed
by such a release (it has no `MetricsNamespace` output) still emits there, so readers fall back to it."""


def stack_metrics_namespace(stack_name: str) -> str:
    """The CloudWatch namespace of one stack's function metrics: `ExactlyOnceAggregation/<stack name>`.

    Why one per stack: CloudWatch keys a series by namespace, name and dimensions, so two stacks in
    one account and region whose functions emitted the same `service` dimension into one namespace
    would add to each other's series (alarms, dashboard, `producer send`'s read-back). A namespace,
    rather than a second dimension, keeps every series' dimension set the single `service` that
    alarms and percentiles are read by. Never the legacy namespace itself, so a stack of an earlier
    release left in the account cannot add to a new one's. A stack name (at most 128 letters, digits
    and hyphens) keeps the result within CloudWatch's 255 characters.
    """
    return f"{LEGACY_METRICS_NAMESPACE}/{stack_name}"


STATE_SERVICE: Final = "state"
MAP_SERVICE: Final = "map"
REDUCE_SERVICE: Final = "reduce"
ARCHIVE_SERVICE: Final = "archive"
"""Each function's Powertools service: the `service` dimension of its metrics."""
SETTINGS_GUARD_SERVICE: Final = "settings-guard"
"""The settings guard's Powertools service (it logs, and emits no metrics)."""

STATE_SETTINGS_GUARD_TYPE: Final = "Custom::StateSettingsGuard"
"""The custom resource type of the settings guard: the stack declares it, and the local deployer,
whose emulator cannot invoke it, finds it by this type and runs its handler itself."""

QUARANTINED_RECORDS: Final = "QuarantinedRecords"
CONFLICTING_DUPLICATES: Final = "ConflictingDuplicates"
NON_INSERT_RECORDS_SKIPPED: Final = "NonInsertRecordsSkipped"
"""The metrics an alarm fires on at any non-zero count (state; state; reduce and archive)."""

TRANSACTION_CONFLICTS_RETRIED: Final = "TransactionConflictsRetried"
"""Reduce: transactions cancelled by a conflict with another reducer and resent identically."""

MESSAGES_RECEIVED: Final = "MessagesReceived"
MESSAGES_WRITTEN: Final = "MessagesWritten"
"""State: Kinesis records read, and new versions written to the StateTable."""

STATE_CHANGES_MAPPED: Final = "StateChangesMapped"
"""Map: StateTable stream records written into a new delta item."""

END_TO_END_LATENCY: Final = "EndToEndLatency"
"""Reduce: one value per applied message, milliseconds from its producer `Timestamp` to the commit
of its totals (`aggregation.latency`); reduce also emits `MessagesApplied` (`MESSAGES_APPLIED`,
the name of the `#stats` count). Both high-resolution: `producer send` reads them back."""

# -- Reduce idempotency modes (`reduceIdempotency`, `REDUCE_IDEMPOTENCY`) --

TOKEN_AND_MARKERS: Final = "crt+marker"
"""ClientRequestToken plus a marker per delta unit: a replay changes nothing, ever (default)."""

TOKEN_ONLY: Final = "crt"
"""ClientRequestToken only (the original design): safe for a replay within 10 minutes."""

UNSAFE_ADD: Final = "unsafe-add"
"""Plain ADDs: the chaos suite's negative control, refused by the stack's settings."""
