"""Faster ways for moto to give the very same answers: performance only, no behaviour change.

`local.emulator.moto_compat` corrects moto where it deviates from AWS; this module changes
nothing a client can observe, only what moto spends per request and keeps in memory while
a long load test runs. `apply()` installs every patch (idempotently) next to
`moto_compat.apply()` in `local.emulator.__main__.serve`. Each patch is one small function
whose docstring says what moto does, what is done instead and why the result is identical;
tests/local/emulator/test_speedups.py compares each against moto's own path.

Measured by the issue 22 profile (docs/design.md, "Local runtime"): moto's shape-driven
response serialiser spent about 1.8 ms per DynamoDB stream record in GetRecords, and each
record kept both item images as Python dicts (8.4 KB).
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime
import functools
import importlib
import io
import json
import re
import string
import sys
import threading
import weakref
import zlib
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from moto import backends as moto_backends
from moto.core import responses as moto_responses
from moto.core.common_models import BaseModel
from moto.core.serialize import BaseJSONSerializer, TimestampSerializer
from moto.core.utils import unix_time, utcnow
from moto.dynamodb import models as moto_models
from moto.dynamodb.comparisons import ConditionExpressionParser
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models import dynamo_type as dynamo_type_module
from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict
from moto.dynamodb.models.table import RESULT_SIZE_LIMIT, StreamRecord, StreamShard, Table
from moto.dynamodb.parsing.ast_nodes import (  # type: ignore[attr-defined]
    DepthFirstTraverser,
    Expression,
    Node,
    UpdateExpressionFunction,
)
from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]
from moto.dynamodb.parsing.validators import (
    ActionCountValidator,
    OverlappingPathsValidator,
    UpdateExpressionValidator,
    UpdateHashRangeKeyValidator,
)
from moto.dynamodbstreams.models import DynamoDBStreamsBackend, ShardIterator
from moto.dynamodbstreams.responses import DynamoDBStreamsHandler
from moto.kinesis import models as kinesis_models
from moto.kinesis.models import Shard
from moto.moto_api._internal import mock_random
from moto.moto_server.werkzeug_app import MotoRequestHandler

from local.emulator import moto_compat
from local.emulator.moto_compat import table_stream_shards

# ------------------------------------------------------ DynamoDB Streams records

_RECORD_MEMBERS = ("eventID", "eventName", "eventVersion", "eventSource", "awsRegion", "dynamodb", "userIdentity")
"""Members of the DynamoDB Streams `Record` shape, in the order of the service model (moto's output order)."""
_STREAM_RECORD_MEMBERS = (
    "ApproximateCreationDateTime",
    "Keys",
    "NewImage",
    "OldImage",
    "SequenceNumber",
    "SizeBytes",
    "StreamViewType",
)
"""Members of the `StreamRecord` shape, in service-model order."""
_IMAGES = ("Keys", "NewImage", "OldImage")
_EPOCH = datetime.datetime(1970, 1, 1)
"""moto's timestamps are naive UTC datetimes."""
_COMPRESSION_LEVEL = 1
"""zlib's fastest level: most of the saving (records repeat attribute names) for the least CPU."""
_DICTIONARY = "_compact_record_dictionary"
"""The `StreamShard` attribute holding the text its records are compressed against."""
_JSON_CONTENT_TYPE = "application/x-amz-json-1.0"
"""What moto's serialiser sends for DynamoDB Streams (the service model's jsonVersion 1.0)."""


def _wire_attribute_value(value: dict[str, Any]) -> dict[str, Any]:
    """One AttributeValue as moto's serialiser writes it: blobs base64 (str encoded first, as moto does)."""
    ((kind, content),) = value.items()
    if kind == "B":
        return {kind: _base64(content)}
    if kind == "BS":
        return {kind: [_base64(member) for member in content]}
    if kind == "M":
        return {kind: {name: _wire_attribute_value(member) for name, member in content.items()}}
    if kind == "L":
        return {kind: [_wire_attribute_value(member) for member in content]}
    return {kind: content}


def _base64(value: str | bytes) -> str:
    """moto's `ResponseSerializer._base64`: a str is encoded to UTF-8 and then base64-encoded."""
    raw = value.encode("utf-8") if isinstance(value, str) else value
    return base64.b64encode(raw).strip().decode("utf-8")


def _native_attribute_value(value: dict[str, Any]) -> dict[str, Any]:
    """The inverse of `_wire_attribute_value` for blobs moto stores as bytes."""
    ((kind, content),) = value.items()
    if kind == "B":
        return {kind: base64.b64decode(content)}
    if kind == "BS":
        return {kind: [base64.b64decode(member) for member in content]}
    if kind == "M":
        return {kind: {name: _native_attribute_value(member) for name, member in content.items()}}
    if kind == "L":
        return {kind: [_native_attribute_value(member) for member in content]}
    return {kind: content}


def wire_record(record: dict[str, Any]) -> dict[str, Any]:
    """A moto `StreamRecord.record` as GetRecords returns it: shape order, epoch timestamps, base64 blobs.

    The timestamp goes through moto's own `_timestamp_unixtimestamp` (seconds, truncated to
    milliseconds); members moto's serialiser would skip (None) are skipped.
    """
    stream: dict[str, Any] = record["dynamodb"]
    wire_stream: dict[str, Any] = {}
    for name in _STREAM_RECORD_MEMBERS:
        value = stream.get(name)
        if value is None:
            continue
        if name == "ApproximateCreationDateTime" and isinstance(value, datetime.datetime):
            value = TimestampSerializer._timestamp_unixtimestamp(value)
        elif name in _IMAGES:
            value = {attribute: _wire_attribute_value(member) for attribute, member in value.items()}
        wire_stream[name] = value
    wire: dict[str, Any] = {}
    for name in _RECORD_MEMBERS:
        value = wire_stream if name == "dynamodb" else record.get(name)
        if value is not None:
            wire[name] = value
    return wire


class CompactStreamRecord:
    """A stream record kept as the JSON text GetRecords sends, compressed.

    A StateTable record is about 1 KB of JSON (8.4 KB as moto's dicts), 0.5 KB compressed on
    its own and about 0.16 KB with a `dictionary`: zlib's preset dictionary, the text of an
    earlier record of the same shard, which names the same attributes and repeats most of
    their values (docs/benchmarks.md, "Soak"). Every record is kept for the stream's life
    and read about once, so compressing once and inflating on each read (microseconds) is
    the cheaper side. `sequence_number` is kept apart so reads need not inflate the text.
    `to_json()` (and `record`) rebuild moto's own form, so any moto code reading a shard's
    items still works.
    """

    __slots__ = ("_dictionary", "_packed", "sequence_number")

    def __init__(self, record: dict[str, Any], dictionary: bytes | None = None) -> None:
        self.sequence_number = int(record["dynamodb"]["SequenceNumber"])
        self._dictionary = dictionary
        text = json.dumps(wire_record(record)).encode()
        if dictionary is None:
            self._packed = zlib.compress(text, _COMPRESSION_LEVEL)
        else:
            compressor = zlib.compressobj(_COMPRESSION_LEVEL, zdict=dictionary)
            self._packed = compressor.compress(text) + compressor.flush()

    @property
    def text(self) -> str:
        """The record's GetRecords JSON."""
        if self._dictionary is None:
            return zlib.decompress(self._packed).decode()
        decompressor = zlib.decompressobj(zdict=self._dictionary)
        return (decompressor.decompress(self._packed) + decompressor.flush()).decode()

    def to_json(self) -> dict[str, Any]:
        """moto's `StreamRecord.record`: a datetime (to the millisecond, as sent) and bytes for blobs."""
        record: dict[str, Any] = json.loads(self.text)
        stream = record["dynamodb"]
        seconds: float = stream["ApproximateCreationDateTime"]
        # moto writes an int for a whole second and a float otherwise, even for 1..999 microseconds.
        milliseconds = round(seconds * 1000)
        below_a_millisecond = 1 if isinstance(seconds, float) and milliseconds % 1000 == 0 else 0
        stream["ApproximateCreationDateTime"] = _EPOCH + datetime.timedelta(
            milliseconds=milliseconds, microseconds=below_a_millisecond
        )
        for image in _IMAGES:
            if image in stream:
                stream[image] = {name: _native_attribute_value(value) for name, value in stream[image].items()}
        return record

    @property
    def record(self) -> dict[str, Any]:
        return self.to_json()


def _compact(record: StreamRecord | CompactStreamRecord, shard: StreamShard | None = None) -> CompactStreamRecord:
    """`record` compact; with `shard`, compressed with the shard's dictionary (its first record's
    text, taken from the first record compacted here)."""
    if isinstance(record, CompactStreamRecord):
        return record
    if shard is None:
        return CompactStreamRecord(record.record)
    dictionary: bytes | None = getattr(shard, _DICTIONARY, None)
    if dictionary is None:
        dictionary = json.dumps(wire_record(record.record)).encode()
        setattr(shard, _DICTIONARY, dictionary)
    return CompactStreamRecord(record.record, dictionary)


def store_stream_records_as_json() -> None:
    """Each DynamoDB stream record is kept as its GetRecords JSON, made once when it is written.

    moto keeps a `StreamRecord` per change with both images as nested dicts (8.4 KB for a
    StateTable record; nothing is ever freed, 7 KB per message in a soak) and serialises
    them through its shape-driven serialiser on every GetRecords. Here `StreamShard.add`
    replaces each record it appends by a `CompactStreamRecord`, the same record as the
    JSON text moto's serialiser would produce for it, compressed against the text of the
    shard's first record (`CompactStreamRecord`'s dictionary). The list and the sequence
    numbers are moto's own (the records appended are found by sequence number, which stays
    right when `moto_compat`'s retention trims the front), so iterators, the transaction
    journal of `moto_compat` and every shard of a stream (whichever `StreamShard` appends)
    are unaffected.
    """
    original_add = StreamShard.add
    if getattr(original_add, "_speedup", False):
        return

    @functools.wraps(original_add)
    def add(self: StreamShard, old: Any, new: Any) -> None:
        # Every shard of the stream: the record goes to its item's shard (`moto_compat`, several
        # shards). The next sequence number, not the length: retention may trim the front meanwhile.
        shards = table_stream_shards(self.table) or [self]
        first_added = [shard.starting_sequence_number + len(shard.items) for shard in shards]
        original_add(self, old, new)
        for shard, first in zip(shards, first_added, strict=True):
            items: list[Any] = shard.items
            for index in range(max(0, first - shard.starting_sequence_number), len(items)):
                items[index] = _compact(items[index], shard)

    add._speedup = True  # type: ignore[attr-defined]
    StreamShard.add = add  # type: ignore[method-assign]


def read_stream_records(backend: DynamoDBStreamsBackend, iterator_arn: str, limit: int) -> tuple[str, str]:
    """moto's `DynamoDBStreamsBackend.get_records` as (NextShardIterator, the records' JSON array).

    The same records and the same next iterator as `ShardIterator.get`: the slice of the
    iterator's own `StreamShard` from its sequence number, then AFTER the last record read
    or, when none, AT the same position. One slice of an append-only list, so a record is
    either in it whole or not at all.
    """
    iterator = backend.shard_iterators[iterator_arn]
    shard = iterator.stream_shard
    start = iterator.sequence_number - shard.starting_sequence_number
    assert start >= 0
    records = [_compact(record) for record in shard.items[start : start + limit]]
    if records:
        following = ShardIterator(backend, shard, "AFTER_SEQUENCE_NUMBER", records[-1].sequence_number)
    else:
        following = ShardIterator(backend, shard, "AT_SEQUENCE_NUMBER", iterator.sequence_number)
    backend.shard_iterators[following.arn] = following
    return following.arn, "[" + ", ".join(record.text for record in records) + "]"


def serve_stream_records_from_stored_json() -> None:
    """DynamoDB Streams GetRecords answers with the stored JSON of its records, joined.

    moto builds the reply with its generic `ResponseSerializer`, which walks the service
    model for every attribute of every image (about 1.8 ms per record, 22 % of the
    emulator's CPU in a demo, all under the DynamoDB lock). Here the handler writes
    ``{"Records": [...], "NextShardIterator": "..."}`` from the records'
    `CompactStreamRecord.text`: the same members in the same order, the same encoding
    (`json.dumps` defaults, as moto's serialiser uses), the same Content-Type.
    """
    original = DynamoDBStreamsHandler.get_records
    if getattr(original, "_speedup", False):
        return

    @functools.wraps(original)
    def get_records(self: DynamoDBStreamsHandler) -> tuple[str, dict[str, str]]:
        limit = self._get_param("Limit")
        next_iterator, records = read_stream_records(
            self.backend, self._get_param("ShardIterator"), 1000 if limit is None else limit
        )
        body = '{"Records": ' + records + ', "NextShardIterator": ' + json.dumps(next_iterator) + "}"
        return body, {"Content-Type": _JSON_CONTENT_TYPE}

    get_records._speedup = True  # type: ignore[attr-defined]
    DynamoDBStreamsHandler.get_records = get_records  # type: ignore[method-assign,assignment]


# --------------------------------------------------------------- expressions

EXPRESSION_CACHE_SIZE = 1024
"""Distinct expression texts kept parsed; a pipeline uses a few dozen."""


class _ParsedCache:
    """Least-recently-used parse results by expression text, shared by all request threads."""

    def __init__(self, size: int) -> None:
        self._entries: OrderedDict[str, Any] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, text: str, parse: Callable[[], Any]) -> Any:
        with self._lock:
            if text in self._entries:
                self._entries.move_to_end(text)
                return self._entries[text]
        parsed = parse()  # a syntax error raises here and is never cached: the next request raises it again
        with self._lock:
            self._entries[text] = parsed
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return parsed


def parse_each_update_expression_once() -> None:
    """An UpdateExpression's syntax tree is parsed once per distinct text, then reused.

    moto tokenises and parses the UpdateExpression on every UpdateItem, twice (the request
    handler, to list the names and values used, and `DynamoDBBackend.update_item`), and in
    every TransactWriteItems Update (17 % of UpdateItem's CPU). The tree is a function of
    the text alone: names and values are resolved later, by the validator, on its own deep
    copy (`Validator.__init__`), and the other callers only search the tree. So
    `UpdateExpressionParser.make` returns the tree parsed the first time for that text.
    """
    original = UpdateExpressionParser.make
    if getattr(original, "_speedup", False):
        return
    cache = _ParsedCache(EXPRESSION_CACHE_SIZE)

    def make(cls: type, expression_str: str) -> Node:
        return cache.get(expression_str, lambda: original(expression_str))

    make._speedup = True  # type: ignore[attr-defined]
    UpdateExpressionParser.make = classmethod(make)


def lex_each_condition_expression_once() -> None:
    """A ConditionExpression's tokens are found once per distinct text, then reused.

    moto's `ConditionExpressionParser` lexes the expression with a regular expression per
    token and per token kind on every request (conditions, filters, key conditions). Its
    tokens depend on the text alone (immutable tuples; their empty `children` lists are
    never changed: every later step builds new nodes), so the lexer returns a new deque
    of the tokens found the first time. The steps that use names and values (paths,
    functions, comparisons) still run on every request, so their errors are unchanged.
    """
    original = ConditionExpressionParser._lex_condition_expression
    if getattr(original, "_speedup", False):
        return
    cache = _ParsedCache(EXPRESSION_CACHE_SIZE)

    @functools.wraps(original)
    def lex(self: ConditionExpressionParser) -> deque[Any]:
        tokens: deque[Any] = cache.get(str(self.condition_expression), lambda: tuple(original(self)))
        return deque(tokens)

    lex._speedup = True  # type: ignore[attr-defined]
    ConditionExpressionParser._lex_condition_expression = lex  # type: ignore[method-assign]


_validation = threading.local()


@dataclass
class _NewItemValidation:
    """The validation `update_item` ran on an empty item before creating it, and its result."""

    expression: Node
    names: Any
    values: Any
    result: Node


class _StructureChecked:
    """The (expression tree, ExpressionAttributeNames, table key attributes) whose structural checks passed.

    Keyed by the tree's identity with the tree kept in the entry, so an identity is never
    reused while its entry exists; least recently used entries go beyond `size`.
    """

    def __init__(self, size: int) -> None:
        self._entries: OrderedDict[tuple[int, frozenset[tuple[str, str]], tuple[str, ...]], Node] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    @staticmethod
    def _key(
        expression: Node, names: dict[str, str] | None, keys: list[str]
    ) -> tuple[int, frozenset[tuple[str, str]], tuple[str, ...]]:
        return id(expression), frozenset((names or {}).items()), tuple(keys)

    def passed(self, expression: Node, names: dict[str, str] | None, keys: list[str]) -> bool:
        key = self._key(expression, names, keys)
        with self._lock:
            if self._entries.get(key) is expression:
                self._entries.move_to_end(key)
                return True
        return False

    def remember(self, expression: Node, names: dict[str, str] | None, keys: list[str]) -> None:
        with self._lock:
            self._entries[self._key(expression, names, keys)] = expression
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)


_STRUCTURAL_CHECKS = (ActionCountValidator, OverlappingPathsValidator, UpdateHashRangeKeyValidator)
"""The validators whose verdict depends on the expression's tree, its names and the table's key attributes
alone (they change nothing)."""


class _ValidateNewItemOnce(UpdateExpressionValidator):
    """moto's validator, which reuses the new-item validation for the key-only item that follows,
    and (with `check_each_expression_s_structure_once`) skips the structural checks an expression passed."""

    structure_checked: _StructureChecked | None = None

    def __init__(
        self,
        expression: Node,
        expression_attribute_names: dict[str, str],
        expression_attribute_values: dict[str, dict[str, Any]],
        item: Item,
        table: Any,
    ) -> None:
        self._reused: Node | None = None
        earlier: _NewItemValidation | None = getattr(_validation, "new_item", None)
        _validation.new_item = None
        key_attributes = {name for name in (table.hash_key_attr, table.range_key_attr) if name}
        if (
            earlier is not None
            and earlier.expression is expression
            and earlier.names is expression_attribute_names
            and earlier.values is expression_attribute_values
            and set(item.attrs) <= key_attributes
        ):
            self._reused = earlier.result
            return
        self._expression = expression
        checked = self.structure_checked
        self._key_attributes: list[str] = table.table_key_attrs
        self._structure_passed = checked is not None and checked.passed(
            expression, expression_attribute_names, self._key_attributes
        )
        super().__init__(expression, expression_attribute_names, expression_attribute_values, item, table)
        self._is_new_item = not item.attrs

    def get_ast_processors(self) -> list[DepthFirstTraverser]:
        processors: list[DepthFirstTraverser] = super().get_ast_processors()
        if self._structure_passed:
            return [processor for processor in processors if type(processor) not in _STRUCTURAL_CHECKS]
        return processors

    def validate(self) -> Node:
        if self._reused is not None:
            return self._reused
        result: Node = super().validate()
        checked = self.structure_checked
        if checked is not None and not self._structure_passed:
            checked.remember(self._expression, self.expression_attribute_names, self._key_attributes)
        if self._is_new_item:
            names, values = self.expression_attribute_names, self.expression_attribute_values
            _validation.new_item = _NewItemValidation(self._expression, names, values, result)
        return result


def validate_a_new_item_s_update_once() -> None:
    """An UpdateItem that creates its item validates the expression once, not twice.

    moto's `DynamoDBBackend.update_item`, when the item does not exist, validates the
    expression against an empty item (to refuse it before creating anything), creates the
    key-only item, and validates again against that item (63 % of UpdateItem's CPU is the
    validator: a deep copy of the tree and ten traversals). The two differ only in the key
    attributes, so when the expression names no key attribute they resolve every path the
    same way and give the same tree: the second validation reuses the first's result (each
    tree executed once, as before). An expression naming a key attribute (say
    ``if_not_exists(pk, :v)``) is validated twice as moto does. Errors are raised by the
    first validation in both cases. The new-item result is kept for the thread's next
    validation only, and only for the same expression, names and values objects.
    """
    if moto_models.UpdateExpressionValidator is _ValidateNewItemOnce:  # type: ignore[attr-defined]
        return
    original_update_item = DynamoDBBackend.update_item

    @functools.wraps(original_update_item)
    def update_item(self: DynamoDBBackend, *args: Any, **kwargs: Any) -> Any:
        _validation.new_item = None
        try:
            return original_update_item(self, *args, **kwargs)
        finally:
            _validation.new_item = None

    moto_models.UpdateExpressionValidator = _ValidateNewItemOnce  # type: ignore[attr-defined]
    DynamoDBBackend.update_item = update_item  # type: ignore[method-assign]


def check_each_expression_s_structure_once() -> None:
    """An UpdateExpression's clause counts, overlapping paths and key updates are checked once per expression.

    The first three of the ten processors moto's validator runs on every update refuse a
    clause type used twice (`ActionCountValidator`), two actions on overlapping paths
    (`OverlappingPathsValidator`) and an update of a key attribute
    (`UpdateHashRangeKeyValidator`). The first two search the clauses under every nested
    `UpdateExpression` node, so their work grows with the square of the clauses (about half
    of the validator's CPU for the state function's seven clauses; a reduce transaction
    repeats a two-clause ADD for each of its nodes), yet the three verdicts depend only on
    the parsed tree, which `parse_each_update_expression_once` makes once per text, the
    ExpressionAttributeNames and the table's key attributes, and they change nothing in the
    tree. So once they have passed for a tree, names and keys, later validations of that
    combination skip them; one that failed is never remembered, so it fails again with
    moto's error. Applied after `validate_a_new_item_s_update_once`, whose validator class
    carries it.
    """
    if _ValidateNewItemOnce.structure_checked is None:
        _ValidateNewItemOnce.structure_checked = _StructureChecked(EXPRESSION_CACHE_SIZE)


def _copy_node(node: Node, memo: dict[int, Any]) -> Node:
    """`copy.deepcopy` of one syntax-tree node, without the generic `__reduce_ex__` round trip.

    A node's state is its `__dict__` (`type`, `children`, `parent`); each value is deep-copied
    with the same memo, so the parent links of the copy point into the copy, as before.
    Children that are strings, numbers or booleans (a leaf's name or index) are immutable:
    `deepcopy` returns them themselves, so they are taken as they are; child nodes are
    copied by this function directly (what `deepcopy` would call), anything else by `deepcopy`.
    """
    clone: Node = object.__new__(type(node))
    memo[id(node)] = clone
    state = clone.__dict__
    for name, value in node.__dict__.items():
        if name == "children" and type(value) is list:
            state[name] = [_copy_child(child, memo) for child in value]
        else:
            state[name] = copy.deepcopy(value, memo)
    return clone


def _copy_child(child: Any, memo: dict[int, Any]) -> Any:
    if type(child) in _ATOMIC:
        return child
    if isinstance(child, Node) and id(child) not in memo:
        return _copy_node(child, memo)
    return copy.deepcopy(child, memo)


_ATOMIC = (str, int, bool, float, type(None))
"""What `copy.deepcopy` returns unchanged and a tree's leaves hold."""


def copy_syntax_trees_node_by_node() -> None:
    """The validator's copy of a parsed UpdateExpression is made node by node.

    moto's `Validator.__init__` deep-copies the parsed tree of every update (it resolves
    names and values into its copy), through `copy.deepcopy`'s generic path for objects:
    `__reduce_ex__`, a state dict, `_reconstruct`, and the memo's keep-alive list, for
    every node (about a tenth of the emulator's CPU in a pipeline drain, more for the state
    function's seven-clause update than for a two-clause one). A `Node.__deepcopy__` makes
    the same copy directly: a new object of the node's class whose attributes are deep
    copies of the original's, sharing the memo, so the tree's shape, leaves and parent
    links come out as `copy.deepcopy` makes them.
    """
    if getattr(Node.__dict__.get("__deepcopy__"), "_speedup", False):
        return

    def node_deepcopy(self: Node, memo: dict[int, Any]) -> Node:
        return _copy_node(self, memo)

    node_deepcopy._speedup = True  # type: ignore[attr-defined]
    Node.__deepcopy__ = node_deepcopy


_PROCESSED_BY: dict[tuple[type, type], bool] = {}
"""(traverser class, node class): does that traverser process nodes of that class."""


def _processes(traverser: DepthFirstTraverser, node: Any) -> bool:
    """`isinstance(node, traverser.nodes_to_be_processed())`, found once per pair of classes.

    Every traverser's `_processing_map` is a dict literal of fixed node classes, and no node
    class is registered as a virtual subclass, so the answer depends on the two classes alone.
    """
    key = (type(traverser), type(node))
    known = _PROCESSED_BY.get(key)
    if known is None:
        known = _PROCESSED_BY[key] = isinstance(node, traverser.nodes_to_be_processed())
    return known


_IS_NODE: dict[type, bool] = {}


def _is_node(value: Any) -> bool:
    """`isinstance(value, Node)`, found once per class (`Node` is an ABC nothing is registered with)."""
    known = _IS_NODE.get(type(value))
    if known is None:
        known = _IS_NODE[type(value)] = isinstance(value, Node)
    return known


def _traverse(traverser: DepthFirstTraverser, node: Any, child_id: int = -1) -> Any:
    """moto's `DepthFirstTraverser.traverse_node_recursively`, step for step, with `_processes`."""
    if _is_node(node):
        parent_node = node.parent
        if node.children is not None:
            for index, child_node in enumerate(node.children):
                traverser.pre_processing_of_child(node, index)
                _traverse(traverser, child_node, index)
        if _processes(traverser, node):
            node = traverser.process(node)
            node.parent = parent_node
            if parent_node:
                parent_node.children[child_id] = node
    return node


def find_the_nodes_each_validator_processes_once() -> None:
    """The update validators decide which nodes they process once per node class, not once per node.

    Each of the ten processors an UpdateItem's validation runs walks the whole tree, and for
    every node moto's `traverse_node_recursively` rebuilds the processor's map of node
    classes (`nodes_to_be_processed`, a new dict and tuple each time) and tests the node
    against it through `ABCMeta.__instancecheck__` (together about 6 % of the emulator's CPU
    in a pipeline drain, growing with the number of clauses). `_traverse` does the same
    walk in the same order, with the same hooks and replacements, and remembers the answer
    for each pair of processor and node class.
    """
    original = DepthFirstTraverser.traverse_node_recursively
    if getattr(original, "_speedup", False):
        return

    @functools.wraps(original)
    def traverse_node_recursively(self: DepthFirstTraverser, node: Any, child_id: int = -1) -> Any:
        return _traverse(self, node, child_id)

    traverse_node_recursively._speedup = True  # type: ignore[attr-defined]
    DepthFirstTraverser.traverse_node_recursively = traverse_node_recursively


_DESCENDED: dict[type, bool] = {}
"""Node class: does `Node.find_clauses` look into the children of a node of that class."""


def _find_clauses(node: Node, clause_types: Any) -> list[Node]:
    """moto's `Node.find_clauses`, step for step, with the `isinstance` tests found once per class."""
    clauses: list[Node] = []
    for child in node.children or []:
        kind = type(child)
        if kind in clause_types:
            clauses.append(child)
            continue
        descended = _DESCENDED.get(kind)
        if descended is None:
            descended = _DESCENDED[kind] = isinstance(child, (Expression, UpdateExpressionFunction))
        if descended:
            clauses.extend(child.find_clauses(clause_types))
    return clauses


def find_clauses_without_abc_checks() -> None:
    """`Node.find_clauses` tests each child's class once per class, not with an ABC check per child.

    The first two of an update's ten validators (clause counts, overlapping paths) call
    `find_clauses` on every expression node, and each call walks that node's subtree
    testing every child with `isinstance(child, Expression)`, where `Expression` is an
    `abc.ABCMeta` class (about a fifth of an UpdateItem's CPU for the state function's
    seven clauses, growing with the square of the clauses). Which classes are expressions
    or functions is fixed (no class is registered with the ABC), so `_find_clauses` keeps
    the answer per class and otherwise does what moto does, in the same order.
    """
    original = Node.find_clauses
    if getattr(original, "_speedup", False):
        return

    @functools.wraps(original)
    def find_clauses(self: Node, clause_types: Any) -> list[Node]:
        return _find_clauses(self, clause_types)

    find_clauses._speedup = True  # type: ignore[attr-defined]
    Node.find_clauses = find_clauses


def _regular_json(value: DynamoType) -> dict[str, Any]:
    """moto's `DynamoType.to_regular_json`, building the new value once instead of deep-copying it first."""
    content = value.value
    if isinstance(content, dict):
        content = {
            name: _regular_json(member) if isinstance(member, DynamoType) else copy.deepcopy(member)
            for name, member in content.items()
        }
    elif isinstance(content, list):
        content = [
            _regular_json(member) if isinstance(member, DynamoType) else copy.deepcopy(member) for member in content
        ]
    if value.is_binary() and isinstance(content, str):
        content = base64.b64decode(content)
    return {value.type: content}


def convert_attribute_values_without_copying_them_first() -> None:
    """`DynamoType.to_regular_json` builds its answer without deep-copying the value first.

    moto deep-copies a value's whole content and then replaces every nested `DynamoType` in
    the copy by its own `to_regular_json()`, which deep-copies that member's content again:
    a map nested n deep is copied n times. It runs for both images of every stream record
    (`StreamRecord.__init__`, about 5 % of the emulator's CPU in a pipeline drain; a table
    without a stream never pays it). `_regular_json` builds the same new dicts and lists
    once: nested values are converted, anything else is deep-copied as before, and a
    binary value is decoded as moto does.
    """
    original = DynamoType.to_regular_json
    if getattr(original, "_speedup", False):
        return

    @functools.wraps(original)
    def to_regular_json(self: DynamoType) -> dict[str, Any]:
        return _regular_json(self)

    to_regular_json._speedup = True  # type: ignore[attr-defined]
    DynamoType.to_regular_json = to_regular_json  # type: ignore[method-assign]


class _Unusual(Exception):
    """An attribute value `_serialized_attribute_value` leaves to moto's serialiser."""


_STRING_KINDS = frozenset({"S", "N"})
_STRING_SET_KINDS = frozenset({"SS", "NS"})
_BOOLEAN_KINDS = frozenset({"NULL", "BOOL"})


def _serialized_string(content: Any) -> Any:
    """moto's `BaseJSONSerializer._serialize_type_string` of one value."""
    return str(content) if content not in [None, {}, []] else content


def _serialized_attribute_value(value: Any, base64_of: Callable[[Any], str]) -> dict[str, Any]:
    """One AttributeValue as moto's JSON serialiser writes it, or `_Unusual` for any value it might write otherwise.

    moto walks the `AttributeValue` shape's ten members, looking each one up in the value
    (a one-member dict from `dynamo_to_dict`) and serialising it by its shape: strings with
    `str`, blobs base64, sets and lists member by member, maps by name, booleans as they
    are. Anything else (several members, an unknown or missing one, an empty map key
    that moto's serialiser would merge into the enclosing map) raises `_Unusual`.
    """
    if type(value) is not dict or len(value) != 1:
        raise _Unusual
    ((kind, content),) = value.items()
    if content is None:
        raise _Unusual
    if kind in _STRING_KINDS:
        return {kind: _serialized_string(content)}
    if kind in _BOOLEAN_KINDS:
        return {kind: content}
    if kind == "M" and type(content) is dict:
        if "" in content:
            raise _Unusual
        return {kind: {name: _serialized_attribute_value(member, base64_of) for name, member in content.items()}}
    if kind == "L" and type(content) is list:
        return {kind: [_serialized_attribute_value(member, base64_of) for member in content]}
    if kind in _STRING_SET_KINDS and type(content) is list:
        return {kind: [_serialized_string(member) for member in content]}
    if kind == "B":
        return {kind: base64_of(content)}
    if kind == "BS" and type(content) is list:
        return {kind: [base64_of(member) for member in content]}
    raise _Unusual


def serialize_attribute_values_directly() -> None:
    """DynamoDB replies write each AttributeValue directly instead of through the service model.

    moto's JSON serialiser walks the service model for every attribute of every item it
    returns: for each of the ten members of the `AttributeValue` shape it asks an attribute
    picker (alias providers, `xform_name`) whether the value has it. That is most of the
    cost of an UpdateItem's ALL_OLD reply, a Query's or Scan's items and a transaction's
    cancellation reasons (about a tenth of the emulator's CPU in a pipeline drain). Here
    `BaseJSONSerializer._serialize_type_structure`, for the `AttributeValue` shape under a
    key and with no response transformer registered, writes `_serialized_attribute_value`:
    the same member, converted the same way; anything unusual goes through moto's walk.
    """
    original = BaseJSONSerializer._serialize_type_structure
    if getattr(original, "_speedup", False):
        return

    @functools.wraps(original)
    def serialize_type_structure(self: BaseJSONSerializer, serialized: Any, value: Any, shape: Any, key: str) -> None:
        if shape.name == "AttributeValue" and key and not getattr(self._value_picker, "response_transformers", None):
            try:
                serialized[self.get_serialized_name(shape, key)] = _serialized_attribute_value(value, self._base64)
                return
            except _Unusual:
                pass
        original(self, serialized, value, shape, key)

    serialize_type_structure._speedup = True  # type: ignore[attr-defined]
    BaseJSONSerializer._serialize_type_structure = serialize_type_structure  # type: ignore[method-assign]


# ------------------------------------------------------------------ item size

_PLAIN_NUMBER = re.compile(r"[+-]?(?:(\d+)\.?(\d*)|\.(\d+))")
"""A number written without an exponent: the digits before and after the point."""
_MOST_EXACT_DIGITS = 400
"""`moto_compat`'s number context keeps 400 digits; a longer coefficient is left to its rules (which refuse it)."""
_SET_KINDS = {"SS": "S", "NS": "N", "BS": "B"}


def _number_size(text: Any) -> int | None:
    """`_documented_size` of a number written plainly, from its digits; None for anything else.

    A number's size is one byte per two significant digits plus one, its significant digits
    being those left when leading and trailing zeros go (zero has one): what
    `moto_compat._documented_size` reads from the normalised Decimal's digits.
    """
    match = _PLAIN_NUMBER.fullmatch(text) if type(text) is str else None
    if match is None:
        return None
    coefficient = "".join(part for part in match.groups() if part).lstrip("0")
    if len(coefficient) > _MOST_EXACT_DIGITS:
        return None  # beyond the context's precision even before trailing zeros go: its rules refuse it
    significant = len(coefficient.rstrip("0")) or 1
    return (significant + 1) // 2 + 1


def _attribute_size(value: DynamoType) -> int:
    """`moto_compat._documented_size`, by the value's type letter, numbers counted from their text."""
    kind = value.type
    content = value.value
    if kind == "S" and type(content) is str:
        return len(content.encode("utf-8"))
    if kind == "N":
        size = _number_size(content)
        return moto_compat._documented_size(value) if size is None else size
    if kind == "M" and type(content) is dict:
        return 3 + sum(1 + len(name.encode()) + _attribute_size(member) for name, member in content.items())
    if kind == "L" and type(content) is list:
        return 3 + sum(1 + _attribute_size(member) for member in content)
    if kind in _SET_KINDS and type(content) is list:
        return sum(_attribute_size(DynamoType({_SET_KINDS[kind]: member})) for member in content)
    return moto_compat._documented_size(value)


def size_items_without_decimal_arithmetic() -> None:
    """An attribute value's size is counted from its text, not through a normalised Decimal.

    `moto_compat.fix_item_size_follows_the_developer_guide` sizes every value by the
    Developer Guide's rules, converting each number to a Decimal and normalising it to count
    its significant digits, and testing the type with a method call per kind. It runs for
    every attribute of every item each write stores (the 400 KB check) and each Scan reads
    (its 1 MB page): a delta item's hundred nodes and timestamps, a reduce transaction's
    nodes. `_attribute_size` counts the same bytes: a plainly written number's significant
    digits from its text, anything else (an exponent, a value moto keeps unusually) by
    `moto_compat`'s own function.
    """
    original = DynamoType.size
    if getattr(original, "_speedup", False) or not getattr(original, "_compat_fix", False):
        return  # applied already, or moto's own sizes (without `moto_compat`) are not the ones counted here

    @functools.wraps(original)
    def size(self: DynamoType) -> int:
        return _attribute_size(self)

    size._speedup = True  # type: ignore[attr-defined]
    DynamoType.size = size  # type: ignore[method-assign]


_sizing = threading.local()
"""`memo` while an `Item` is being built: id of each attribute value sized -> (the value, its size)."""


def size_a_new_item_s_attributes_once() -> None:
    """While an item is built, each of its attribute values is sized once, not once per attribute added after it.

    moto's `Item.__init__` adds the attributes one by one to a `LimitedSizeDict`, whose
    `__setitem__` sums the sizes of every attribute already there before each addition (its
    400 KB check): a put of n attributes sizes the first one n times, so a delta item's
    105-node map is sized five times (PutItem, a transaction's Put, and `table.put_item`
    behind PartiQL statements all build their item this way). Nothing changes a value while
    the item is built, so during `Item.__init__` each value's size is remembered by identity
    (with the value kept, so an identity cannot be reused meanwhile) and the same sums are
    made of the same sizes: the same check, at the same attribute, with the same error.
    Outside `Item.__init__` (an update changing an item in place) sizes are counted afresh.
    """
    original_init = Item.__init__
    if getattr(original_init, "_speedup", False):
        return
    original_size = DynamoType.size

    @functools.wraps(original_size)
    def size(self: DynamoType) -> int:
        memo: dict[int, tuple[DynamoType, int]] | None = getattr(_sizing, "memo", None)
        if memo is None:
            return original_size(self)
        known = memo.get(id(self))
        if known is None or known[0] is not self:
            known = memo[id(self)] = (self, original_size(self))
        return known[1]

    @functools.wraps(original_init)
    def init(self: Item, hash_key: DynamoType, range_key: DynamoType | None, attrs: dict[str, Any]) -> None:
        outer = getattr(_sizing, "memo", None)
        _sizing.memo = {}
        try:
            original_init(self, hash_key, range_key, attrs)
        finally:
            _sizing.memo = outer

    init._speedup = True  # type: ignore[attr-defined]
    DynamoType.size = size  # type: ignore[method-assign]
    Item.__init__ = init  # type: ignore[method-assign]


# ----------------------------------------------------------------------- Scan


def _sort_key(item: Item) -> Any:
    """moto's `Table.all_items` sort key, with each key's `cast_value` read once instead of per comparison."""
    if item.range_key:
        return (item.hash_key.cast_value, item.range_key.cast_value)
    return item.hash_key.cast_value


def _all_items(table: Table) -> list[Item]:
    """moto's `Table.all_items`: every item, ordered by key (the same comparisons of the same values)."""
    items: list[Item] = []
    for hash_set in table.items.values():
        if table.range_key_attr:
            items.extend(hash_set.values())
        else:
            items.append(hash_set)  # type: ignore[arg-type]  # without a range key, the item itself
    return sorted(items, key=_sort_key)


def _passes_filters(item: Item, filters: dict[str, Any]) -> bool:
    """moto's test of an item against a Scan's legacy `ScanFilter` (`Table.scan`)."""
    for attribute_name, (comparison_operator, comparison_objs) in filters.items():
        attribute = item.attrs.get(attribute_name)
        if attribute:
            if not attribute.compare(comparison_operator, comparison_objs):
                return False
        elif comparison_operator != "NULL":
            return False
    return True


def _scan_table(
    table: Table,
    *,
    filters: dict[str, Any],
    limit: int,
    exclusive_start_key: dict[str, Any],
    filter_expression: Any,
    projection_expression: list[list[str]] | None,
    segments: tuple[None, None] | tuple[int, int],
) -> tuple[list[Item], int, dict[str, Any] | None]:
    """moto's `Table.scan` of a table (no index), step for step, copying only the items it returns.

    The same page (the same `Limit`, size limit and `LastEvaluatedKey`, both counted before the
    FilterExpression, as moto and DynamoDB count them) and the same evaluation order; the
    FilterExpression and the projection read the stored item, which they never change, and an
    item is deep-copied only once it is known to be returned (after its projection, which
    builds a new item from converted copies of the values).
    """
    page: list[tuple[Item, int]] = []
    result_size = 0
    scanned_count = 0
    last_evaluated_key = None
    processing_previous_page = exclusive_start_key is not None
    hash_attrs = [table.hash_key_attr]
    range_attrs = [table.range_key_attr]
    for item in table.all_items():
        if not item.is_within_segment(segments):
            continue
        if processing_previous_page:
            if table._item_comes_before_dct(item, exclusive_start_key, hash_attrs, range_attrs, True):
                continue
            processing_previous_page = False
        size = item.size()
        if len(page) == limit or (result_size + size) > RESULT_SIZE_LIMIT:
            last_evaluated_key = copy.deepcopy(table._get_last_evaluated_key(page[-1][0], None))
            break
        if _passes_filters(item, filters):
            page.append((item, size))
            result_size += size
        scanned_count += 1
    returned = [item for item, _ in page]
    if filter_expression is not None:
        returned = [item for item in returned if filter_expression.expr(item)]
    if projection_expression:
        results = [copy.deepcopy(item.project(projection_expression)) for item in returned]
    else:
        results = [copy.deepcopy(item) for item in returned]
    return results, scanned_count, last_evaluated_key


def sort_a_table_s_items_by_their_key_values() -> None:
    """A table's items are sorted by their keys' values, each read once, not by comparing `DynamoType`s.

    Every Scan and every Query (and PartiQL statement) starts from moto's `Table.all_items`,
    which sorts the whole table with `DynamoType.__lt__`: each comparison converts both keys
    (`cast_value`, a chain of type tests), about 2 n log n conversions. `_all_items` sorts by
    the same converted values, read once per item: the comparisons, and so the order of a
    stable sort, are the same.
    """
    original = Table.all_items
    if getattr(original, "_speedup", False):
        return

    @functools.wraps(original)
    def all_items(self: Table) -> list[Item]:
        return _all_items(self)

    all_items._speedup = True  # type: ignore[attr-defined]
    Table.all_items = all_items  # type: ignore[method-assign]


def scan_without_copying_what_is_filtered_out() -> None:
    """A Scan deep-copies only the items it returns, and sizes each item once.

    moto's `Table.scan` deep-copies every item it reads before applying the FilterExpression
    and the projection, and computes each item's size twice. A Scan for a few items of a
    large table (the benchmark's marker poller, `producer verify`'s drain poll, which both run
    while the pipeline works) so copied the whole table each time. `_scan_table` does the same
    steps on the stored items and copies only the page's returned items; scans of an index
    go through moto's own path. (The sort is `sort_a_table_s_items_by_their_key_values`'.)
    """
    original = Table.scan
    if getattr(original, "_speedup", False):
        return

    @functools.wraps(original)
    def scan(  # noqa: PLR0917 (moto's signature)
        self: Table,
        filters: dict[str, Any],
        limit: int,
        exclusive_start_key: dict[str, Any],
        filter_expression: Any = None,
        index_name: str | None = None,
        consistent_read: bool = False,
        projection_expression: list[list[str]] | None = None,
        segments: tuple[None, None] | tuple[int, int] = (None, None),
    ) -> tuple[list[Item], int, dict[str, Any] | None]:
        if index_name:
            return original(
                self,
                filters,
                limit,
                exclusive_start_key,
                filter_expression,
                index_name,
                consistent_read,
                projection_expression,
                segments,
            )
        return _scan_table(
            self,
            filters=filters,
            limit=limit,
            exclusive_start_key=exclusive_start_key,
            filter_expression=filter_expression,
            projection_expression=projection_expression,
            segments=segments,
        )

    scan._speedup = True  # type: ignore[attr-defined]
    Table.scan = scan  # type: ignore[method-assign]


# ------------------------------------------------------------------- Kinesis


def read_kinesis_shards_by_sequence_number() -> None:
    """Kinesis puts and reads cost the same at the millionth record as at the first.

    moto's `Shard.put_record` finds the last sequence number with
    `list(self.records.keys())[-1]`, and `Shard.get_records` walks the shard from its first
    record on every call (3.4 ms per put and 7.5 ms per tail read at 100,000 records, under
    the Kinesis lock). Every record enters a shard through `put_record` as the last
    sequence number + 1, so a shard's keys are consecutive and ascending: the first and last
    are the ends of the ordered dict, and the records after a sequence number are found by
    number. `get_records` checks that the keys are consecutive (first, last and length)
    and otherwise runs moto's walk, as it does for a Limit below the API's minimum of 1.
    """
    original_get_records = Shard.get_records
    if getattr(original_get_records, "_speedup", False):
        return

    def get_min_sequence_number(self: Shard) -> int:
        return next(iter(self.records), 0)

    def get_max_sequence_number(self: Shard) -> int:
        return next(reversed(self.records), 0)

    @functools.wraps(original_get_records)
    def get_records(self: Shard, last_sequence_id: str, limit: int | None) -> tuple[list[Any], int, int]:
        records = self.records
        after = int(last_sequence_id)
        if not records:
            return [], after, 0
        first, last = next(iter(records)), next(reversed(records))
        if last - first + 1 != len(records) or (limit is not None and limit < 1):  # (the API's minimum is 1)
            return original_get_records(self, last_sequence_id, limit)
        start = max(after + 1, first)
        stop = last if limit is None else min(last, start + limit - 1)
        found = [records[number] for number in range(start, stop + 1)]
        if not found:
            return [], after, 0
        return found, stop, int((records[last].created_at - found[-1].created_at) * 1000)

    get_records._speedup = True  # type: ignore[attr-defined]
    Shard.get_min_sequence_number = get_min_sequence_number  # type: ignore[method-assign]
    Shard.get_max_sequence_number = get_max_sequence_number  # type: ignore[method-assign]
    Shard.get_records = get_records  # type: ignore[method-assign]


# ------------------------------------------------------------ every request


def list_moto_s_modules_once() -> None:
    """moto's list of its service modules is read from disk once, not on every request.

    moto's server finds the backend of every request with `backends.list_of_moto_modules`,
    which lists moto's package directory and stats each entry, twice per request (3 % of
    the emulator's CPU). The installed package does not change while the server runs, so
    the same names come back from a tuple made the first time.
    """
    original = moto_backends.list_of_moto_modules
    if getattr(original, "_speedup", False):
        return
    modules: tuple[str, ...] = tuple(original())

    def list_of_moto_modules() -> tuple[str, ...]:
        return modules

    list_of_moto_modules._speedup = True  # type: ignore[attr-defined]
    moto_backends.list_of_moto_modules = list_of_moto_modules


def find_each_handler_s_actions_once() -> None:
    """The actions a moto response class implements are listed once per class, not per request.

    moto's `BaseResponse.call_action` checks the requested action against
    `method_names_from_class`, an `inspect.getmembers` of the whole class on every request.
    Which names are functions is fixed once moto and the compat fixes are installed (the
    fixes replace methods, they add no action), and `apply()` runs after them, so the
    names are found once per class and reused.
    """
    original = moto_responses.method_names_from_class  # type: ignore[attr-defined]
    if getattr(original, "_speedup", False):
        return

    @functools.cache
    def method_names_from_class(clazz: object) -> list[str]:
        return original(clazz)

    method_names_from_class._speedup = True  # type: ignore[attr-defined]
    moto_responses.method_names_from_class = method_names_from_class  # type: ignore[attr-defined]


_REQUEST_ID_ALPHABET = string.ascii_letters + string.digits
_REQUEST_ID_LENGTH = 52


def draw_request_ids_in_one_call() -> None:
    """A response's request id is drawn with one `choices` call instead of 52 `choice` calls.

    moto's `gen_amzn_requestid_long` builds the 52 letters and digits of every response's
    ``x-amzn-requestid`` one `random.choice` at a time (10 % of an empty GetRecords). The
    id has the same length and alphabet, drawn from the same seedable `mock_random`, so
    moto's seeding (``/moto-api/seed``) still makes the ids repeatable.
    """
    original = moto_responses.gen_amzn_requestid_long  # type: ignore[attr-defined]
    if getattr(original, "_speedup", False):
        return

    def gen_amzn_requestid_long(headerdict: dict[str, Any] | None = None) -> str:
        request_id = "".join(mock_random.choices(_REQUEST_ID_ALPHABET, k=_REQUEST_ID_LENGTH))
        if isinstance(headerdict, dict):
            headerdict["x-amzn-requestid"] = request_id
        return request_id

    gen_amzn_requestid_long._speedup = True  # type: ignore[attr-defined]
    moto_responses.gen_amzn_requestid_long = gen_amzn_requestid_long  # type: ignore[attr-defined]


# ----------------------------------------------------------- the HTTP server


class KeepAliveRequestHandler(MotoRequestHandler):
    """moto's request handler, keeping each client's connection open between requests (HTTP/1.1).

    werkzeug's development server answers every request with ``Connection: close``, so each
    SDK call opens a new TCP connection and the server a new thread (9 % of the emulator's
    CPU, 3-5 % of each worker's time in `create_connection`). It closes because, after the
    response, it drains whatever the application left unread from the socket, which on a
    kept connection could be the next request. Here the request body is read whole
    (Content-Length) before the application runs, and the drain reads an empty buffer, so
    the next request stays in the socket for the next `handle_one_request`. A request
    without a Content-Length (a chunked body) is answered as before, closing.

    A dropped response (`injected_faults.lose_response`) still shuts the socket down: the
    handler then reads end-of-file and ends the connection, and the client sees it closed
    without a response, as before.
    """

    _keep_alive = False
    disable_nagle_algorithm = True
    """Headers and body go out in two writes; on a kept connection Nagle's algorithm would hold the
    second until the client's delayed ACK (about 40 ms per request). A closing connection flushed it."""

    def handle_one_request(self) -> None:
        socket_file = self.rfile
        self._keep_alive = False
        try:
            super().handle_one_request()
        finally:
            self.rfile = socket_file

    def make_environ(self) -> dict[str, Any]:
        environ: dict[str, Any] = super().make_environ()
        length = self.headers.get("Content-Length", "0").strip() or "0"
        if "Transfer-Encoding" in self.headers or not length.isdigit():
            return environ  # werkzeug reads it its own way, and closes
        environ["wsgi.input"] = io.BytesIO(self.rfile.read(int(length)) if int(length) else b"")
        self.rfile = io.BytesIO()  # what werkzeug's drain after the response reads
        self._keep_alive = True
        return environ

    def send_header(self, keyword: str, value: str) -> None:
        if self._keep_alive and keyword.lower() == "connection" and value.lower() == "close":
            return
        super().send_header(keyword, value)


# ------------------------------------------------------------------------ memory


def keep_each_stream_iterator_s_arn_once() -> None:
    """A DynamoDB Streams shard iterator keeps its ARN, made once, instead of its random part apart.

    moto's `ShardIterator` keeps `id`, 632 random base64 characters, and builds its ARN
    (the iterator string clients send, which ends with that `id`) on every read of `arn`;
    the backend keys its iterators by the ARN, so each iterator kept two long strings. The
    runner's pollers are issued about 25 iterators a second, each kept its 15 minutes
    (`moto_compat.fix_dynamodb_streams_iterators_expire`): about 20,000 at a time, 14 MB
    of `id` strings. Here `__init__` builds the ARN once, as moto builds it, and keeps that
    string only (the backend's key is then the same object); `id` reads back as the ARN's
    last part, so both read exactly as before.
    """
    original_init = ShardIterator.__init__
    if getattr(original_init, "_speedup", False):
        return
    moto_s_arn = vars(ShardIterator)["arn"]

    @functools.wraps(original_init)
    def init(self: ShardIterator, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)  # sets `id`, kept in `_id` until the ARN is made
        self.__dict__["_arn"] = moto_s_arn.fget(self)
        del self.__dict__["_id"]

    def random_part(self: ShardIterator) -> str:
        arn: str | None = self.__dict__.get("_arn")
        return self.__dict__["_id"] if arn is None else arn.rsplit("|", 1)[1]

    def keep_random_part(self: ShardIterator, value: str) -> None:
        self.__dict__["_id"] = value

    init._speedup = True  # type: ignore[attr-defined]
    ShardIterator.__init__ = init  # type: ignore[method-assign]
    ShardIterator.arn = property(lambda self: self.__dict__["_arn"])  # type: ignore[method-assign,assignment]
    ShardIterator.id = property(random_part, keep_random_part)  # type: ignore[assignment]


class CompactKinesisRecord:
    """moto's Kinesis `Record` in slots, its data as the bytes it encodes and its time once.

    moto's record keeps six attributes in an instance dictionary, the data as the base64
    text of the request, and its arrival both as a datetime and as seconds; about 730 bytes
    for a 250-byte message. Here: five slots, the decoded bytes (a quarter smaller, and what
    `to_json` hands the serialiser anyway; data that is not canonical base64 is kept as sent,
    so moto's error, if any, comes where it did), and `created_at` computed from the datetime
    by moto's own `unix_time`, the same float moto stored.
    """

    __slots__ = ("_data", "created_at_datetime", "explicit_hash_key", "partition_key", "sequence_number")

    def __init__(self, partition_key: str, data: str, sequence_number: int, explicit_hash_key: str) -> None:
        self.partition_key = partition_key
        self._data: str | bytes = data
        try:
            decoded = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError, TypeError):
            pass
        else:
            if base64.b64encode(decoded).decode() == data:
                self._data = decoded
        self.sequence_number = sequence_number
        self.explicit_hash_key = explicit_hash_key
        self.created_at_datetime = utcnow()

    @property
    def data(self) -> str:
        """The data as the request sent it (base64 text)."""
        return self._data if isinstance(self._data, str) else base64.b64encode(self._data).decode()

    @property
    def created_at(self) -> float:
        return unix_time(self.created_at_datetime)

    def to_json(self) -> dict[str, Any]:
        """moto's `Record.to_json`."""
        data = self._data if isinstance(self._data, bytes) else base64.b64decode(self._data)
        return {
            "Data": data,
            "PartitionKey": self.partition_key,
            "SequenceNumber": str(self.sequence_number),
            "ApproximateArrivalTimestamp": self.created_at_datetime,
        }


def keep_kinesis_records_compact() -> None:
    """Kinesis records are kept as `CompactKinesisRecord`s: about 165 bytes less each.

    moto's shards (and `moto_compat`'s `put_record`) make a record with the name `Record`
    (`KinesisRecord` in `moto_compat`); both name `CompactKinesisRecord` instead. Every
    reader uses the attributes and `to_json` that it keeps with the same values.
    """
    original: type = kinesis_models.Record
    if original is not CompactKinesisRecord:
        _name_everywhere(original, CompactKinesisRecord)


_S3_FILE_OWNERS: dict[type, weakref.WeakSet[Any]] = {}
"""The live S3 objects holding a file (keys, their versions and parts; multipart uploads), by class:
what `S3Backend.reset` closes, without keeping any of them alive."""


def keep_no_register_of_every_model_instance() -> None:
    """A moto object lives as long as something uses it, not for the life of the server.

    moto's `BaseModel.__new__` appends every instance of every model class to the class's
    `instances_tracked` list, for its dashboard (``/moto-api/data.json``) and for S3's
    reset, and nothing ever removes them. Every DynamoDB `Item` (including the copies
    moto makes of each item it updates, for the old image), every stream record, S3 key,
    shard iterator and CloudWatch datum was therefore kept for ever: in a soak at 50 msg/s
    the emulator held 10 Items per message, about 22 KB, and grew without bound. Here
    `__new__` creates the instance exactly as moto does, without the register: objects
    still stored (table items, stream records, bucket keys) are kept by their stores;
    a copy nothing references is freed. Nothing a client can call reads the register
    except moto's dashboard, which then lists no instances.

    S3's reset reads it to close the file of every key and multipart upload moto ever made,
    the superseded versions of an object and the parts of a pending upload included (the
    buckets list only an object's latest version). So S3's two classes keep a weak register
    (`_S3_FILE_OWNERS`: it frees what nothing else uses, as before) and `S3Backend.reset`
    closes every one still alive before moto's own reset, as moto's register would have it.
    """
    if getattr(BaseModel.__new__, "_speedup", False):
        return

    def new_untracked(cls: type[BaseModel], *args: Any, **kwargs: Any) -> BaseModel:
        return super(BaseModel, cls).__new__(cls)

    def new_weakly_tracked(cls: type[BaseModel], *args: Any, **kwargs: Any) -> BaseModel:
        instance = super(BaseModel, cls).__new__(cls)
        _S3_FILE_OWNERS.setdefault(cls, weakref.WeakSet()).add(instance)
        return instance

    # Imported by name only: mypy reading moto's S3 models changes how it types moto's other modules.
    s3_models: Any = importlib.import_module("moto.s3.models")
    original_reset = s3_models.S3Backend.reset

    @functools.wraps(original_reset)
    def reset(self: Any) -> None:
        for owners in list(_S3_FILE_OWNERS.values()):
            for owner in list(owners):
                owner.dispose()
        original_reset(self)

    new_untracked._speedup = True  # type: ignore[attr-defined]
    BaseModel.__new__ = staticmethod(new_untracked)  # type: ignore[method-assign]
    for owner_class in (s3_models.FakeKey, s3_models.FakeMultipart):
        owner_class.__new__ = staticmethod(new_weakly_tracked)
    s3_models.S3Backend.reset = reset


def keep_attribute_values_in_slots() -> None:
    """Each attribute value (moto's `DynamoType`) keeps its `type` and `value` in two slots, not a dict.

    Every attribute, map member and list element of every item is a `DynamoType`, about 15
    per message in a soak (a DeltaTable item holds three per node and one per record), and
    each carries an instance dictionary for its two fields: 88 bytes where an object with
    `__slots__` needs 48 (Python 3.11, `tracemalloc`). Slots can only be declared when a class
    is made, so this makes moto's class again with the very same namespace (its functions,
    and the patches `moto_compat` installed on it) plus ``__slots__ = ("type", "value")``, and
    rebinds every module attribute that names moto's class (moto's modules, this module's and
    `moto_compat`'s, anything imported so far; a module imported later imports the new one
    from `moto.dynamodb.models.dynamo_type`). moto never reads an instance's `__dict__` nor
    sets another attribute on one, and copies, compares and serialises through the class's
    methods, so every answer is the same. Apply before any item is stored (an instance of
    moto's class would not pass the `type(...) is DynamoType` checks of moto's code).
    """
    original = dynamo_type_module.DynamoType
    if "__slots__" in vars(original):
        return
    namespace = {name: value for name, value in vars(original).items() if name not in ("__dict__", "__weakref__")}
    _name_everywhere(
        original, type(original.__name__, original.__bases__, {**namespace, "__slots__": ("type", "value")})
    )


def _name_everywhere(original: type, replacement: type) -> None:
    """Every module attribute that names `original` (in any module imported so far) names `replacement`."""
    for module in list(sys.modules.values()):
        for name, value in list(getattr(module, "__dict__", {}).items()):
            if value is original:
                setattr(module, name, replacement)


def share_attribute_names() -> None:
    """Every item names its attributes and map keys with the one shared copy of each name.

    moto keeps the names as the request's JSON parser made them, a new string per item: a
    StateTable item spends about 0.6 KB on its 11 names, and a DeltaTable item repeats every
    node name and ``Value`` / ``TradeCount`` for each node of its batch (about 40 KB per item
    in moto for 6 KB of JSON). Interning makes equal names one string object; a string
    compares and hashes the same whichever copy it is, so nothing can tell, and an interned
    string is still freed when no item uses it. Patches `LimitedSizeDict.__setitem__` (an
    item's attribute names, on put and on update) and `DynamoType.__init__` (map keys: moto's
    own constructor, with the keys interned).
    """
    original_set = LimitedSizeDict.__setitem__
    if getattr(original_set, "_speedup", False):
        return

    @functools.wraps(original_set)
    def set_attribute(self: LimitedSizeDict, key: str, value: Any) -> None:
        original_set(self, sys.intern(key), value)

    @functools.wraps(DynamoType.__init__)
    def init(self: DynamoType, type_as_dict: DynamoType | dict[str, Any]) -> None:
        if type(type_as_dict) is DynamoType:
            self.type = type_as_dict.type
            self.value = type_as_dict.value
        else:
            self.type = next(iter(type_as_dict))  # type: ignore[arg-type]
            self.value = next(iter(type_as_dict.values()))  # type: ignore[union-attr]
        if self.is_list():
            self.value = [DynamoType(member) for member in self.value]
        elif self.is_map():
            self.value = {sys.intern(name): DynamoType(member) for name, member in self.value.items()}

    set_attribute._speedup = True  # type: ignore[attr-defined]
    LimitedSizeDict.__setitem__ = set_attribute  # type: ignore[method-assign]
    DynamoType.__init__ = init  # type: ignore[method-assign]


def share_equal_string_values() -> None:
    """Equal string values (`S`) inside the maps and lists of all items are one string object.

    moto keeps each string as the request's JSON parser made it, a new object per item and
    per request, though the strings inside maps and lists repeat: a StateTable item names
    its hierarchy levels twice (the `Hierarchy` map and the `NodePath` list), and every
    trade of a desk names the same desk. Interning those makes equal ones one object:
    2.7 -> 2.4 KB per StateTable item (docs/benchmarks.md, "Memory per structure").
    Top-level values are left as they are: there the strings are mostly unique (TradeID,
    digests, event IDs), and interning a unique string only adds its entry in the interned
    table. A string compares, hashes and serialises the same whichever copy it is, so no
    answer can differ, and an interned string is still freed when nothing uses it. Patches
    `DynamoType.__init__` (every map and list is made by it), on top of `share_attribute_names`.
    """
    original_init = DynamoType.__init__
    if getattr(original_init, "_shares_string_values", False):
        return

    @functools.wraps(original_init)
    def init(self: DynamoType, type_as_dict: DynamoType | dict[str, Any]) -> None:
        original_init(self, type_as_dict)
        if self.type == "M":
            members: Iterable[DynamoType] = self.value.values()
        elif self.type == "L":
            members = self.value
        else:
            return
        for member in members:
            if member.type == "S" and type(member.value) is str:
                member.value = sys.intern(member.value)

    init._shares_string_values = True  # type: ignore[attr-defined]
    DynamoType.__init__ = init  # type: ignore[method-assign]


# ------------------------------------------------------------------------ apply

SPEEDUPS: tuple[Callable[[], None], ...] = (
    keep_attribute_values_in_slots,  # first: the patches below install on the class it makes
    keep_no_register_of_every_model_instance,
    keep_each_stream_iterator_s_arn_once,
    share_attribute_names,
    share_equal_string_values,
    store_stream_records_as_json,
    serve_stream_records_from_stored_json,
    parse_each_update_expression_once,
    lex_each_condition_expression_once,
    validate_a_new_item_s_update_once,
    check_each_expression_s_structure_once,
    copy_syntax_trees_node_by_node,
    find_the_nodes_each_validator_processes_once,
    find_clauses_without_abc_checks,
    convert_attribute_values_without_copying_them_first,
    serialize_attribute_values_directly,
    sort_a_table_s_items_by_their_key_values,
    scan_without_copying_what_is_filtered_out,
    size_items_without_decimal_arithmetic,
    size_a_new_item_s_attributes_once,
    read_kinesis_shards_by_sequence_number,
    keep_kinesis_records_compact,
    list_moto_s_modules_once,
    find_each_handler_s_actions_once,
    draw_request_ids_in_one_call,
)


def apply() -> None:
    """Install every speedup into the imported moto (idempotent; call before serving)."""
    for speedup in SPEEDUPS:
        speedup()
