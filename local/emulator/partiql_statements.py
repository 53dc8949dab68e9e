"""Single-item PartiQL statements of DynamoDB, parsed and translated to item requests.

Why: moto runs every PartiQL statement through a general PartiQL engine over a JSON copy of
every item of every table (time grows with the data), with no condition semantics, no
``ReturnValuesOnConditionCheckFailure`` and no ``DuplicateItem``. DynamoDB's PartiQL writes
are single-item operations (Developer Guide, "PartiQL ... statements for DynamoDB":
ql-reference.insert / .update / .delete / .select), so each one is exactly an item request:

- ``INSERT INTO "T" VALUE {'k': ?, ...}``: a PutItem that must not find the key
  (``DuplicateItem`` otherwise);
- ``UPDATE "T" SET p = v [, p = v | SET p = v]... [REMOVE p [, p]...] WHERE <key> [AND c]``:
  an UpdateItem whose item must exist and satisfy ``c`` (``ConditionalCheckFailed``
  otherwise, "If the WHERE clause ... does not evaluate to true for any item");
- ``DELETE FROM "T" WHERE <key> [AND c]``: a DeleteItem; a missing item is a success with
  nothing deleted, an existing one that fails ``c`` is ``ConditionalCheckFailed``;
- ``SELECT * | p, ... FROM "T" WHERE <key>``: a GetItem.

`parse` turns the text and its ``?`` parameters into a `Statement` (parameters bound in
order; numbers stay their exact text); `item_request` turns it, given the table's key
names, into the equivalent request body with a ConditionExpression and expression
attribute names and values, which `local.emulator.moto_compat` hands to moto's own
PutItem / UpdateItem / DeleteItem / GetItem. Anything outside this subset (functions,
``BETWEEN``, ``IN``, ``RETURNING``, a ``SELECT`` without ``WHERE``, with a filter beyond the key,
or on an index, arithmetic in SET, an unquoted table name with a hyphen) raises `NotUnderstood`
naming what: `local.emulator.moto_compat` then hands the statement to moto's own PartiQL
implementation, which answers it as moto does. What DynamoDB refuses in a statement this module
does understand (a write whose WHERE clause does not name the full key, an INSERT without the
key, a parameter count that does not match) raises `PartiQLValidationError`, AWS's
ValidationException. The module is pure (no moto).

Conditions are evaluated by DynamoDB's condition-expression rules, to which they translate
one for one: a comparison with a missing attribute is false, and ``NOT`` of it true. PartiQL's
own three-valued logic (``MISSING`` propagating through ``NOT``) would make such a ``NOT``
false; AWS documents neither, so a condition should not depend on it (test with
``IS [NOT] MISSING`` instead).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

AttributeValue = dict[str, Any]
"""A DynamoDB AttributeValue as on the wire, e.g. ``{"N": "1.5"}``."""


class PartiQLValidationError(ValueError):
    """A statement DynamoDB refuses: a ValidationException."""


class NotUnderstood(PartiQLValidationError):
    """A statement outside the single-item subset this module translates: for moto's own PartiQL engine."""


# ------------------------------------------------------------------------- tokens

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<quoted>"(?:[^"]|"")*")
    | (?P<string>'(?:[^']|'')*')
    | (?P<number>-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    | (?P<symbol><<|>>|<=|>=|<>|!=|\|\||[=<>(){}\[\],:.?*+\-/%])
    | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)
_BLANK_TO_END = re.compile(r"\s*\Z")
_KEYWORDS = frozenset(
    {
        *("INSERT", "INTO", "VALUE", "UPDATE", "SET", "REMOVE", "WHERE", "DELETE", "FROM", "SELECT"),
        *("AND", "OR", "NOT", "IS", "MISSING", "TRUE", "FALSE", "NULL", "RETURNING"),
    }
)


@dataclass(frozen=True)
class _Token:
    kind: str  # quoted, string, number, symbol, word, end
    text: str
    position: int

    @property
    def keyword(self) -> str | None:
        upper = self.text.upper()
        return upper if self.kind == "word" and upper in _KEYWORDS else None


def _tokens(statement: str) -> list[_Token]:
    tokens: list[_Token] = []
    position = 0
    while position < len(statement):
        if _BLANK_TO_END.match(statement, position):
            break
        match = _TOKEN.match(statement, position)
        if match is None or match.lastgroup is None:
            snippet = statement[position : position + 20].strip()
            raise NotUnderstood(f"Statement wasn't well formed, can't be processed: unexpected {snippet!r}")
        tokens.append(_Token(match.lastgroup, match.group(match.lastgroup), match.start(match.lastgroup)))
        position = match.end()
    tokens.append(_Token("end", "", len(statement)))
    return tokens


# ---------------------------------------------------------------------- the tree


@dataclass(frozen=True)
class Path:
    """An attribute name, or a document path into one: ``("a", "b", 0)`` is ``a.b[0]``."""

    segments: tuple[str | int, ...]

    @property
    def attribute(self) -> str:
        first = self.segments[0]
        assert isinstance(first, str)
        return first


@dataclass(frozen=True)
class Comparison:
    left: Path | AttributeValue
    operator: str  # = <> < <= > >=
    right: Path | AttributeValue


@dataclass(frozen=True)
class Missing:
    path: Path
    negated: bool  # IS NOT MISSING


@dataclass(frozen=True)
class Junction:
    operator: str  # AND, OR
    parts: tuple[Condition, ...]


@dataclass(frozen=True)
class Negation:
    inner: Condition


Condition = Comparison | Missing | Junction | Negation


@dataclass(frozen=True)
class Insert:
    table: str
    item: dict[str, AttributeValue]


@dataclass(frozen=True)
class Update:
    table: str
    assignments: tuple[tuple[Path, AttributeValue], ...]
    removals: tuple[Path, ...]
    where: Condition


@dataclass(frozen=True)
class Delete:
    table: str
    where: Condition


@dataclass(frozen=True)
class Select:
    table: str
    projection: tuple[Path, ...]  # empty: *
    where: Condition


Statement = Insert | Update | Delete | Select


def is_read(statement: Statement) -> bool:
    """Whether `statement` reads (a batch is all reads or all writes)."""
    return isinstance(statement, Select)


# ------------------------------------------------------------------------ parser


class _Parser:
    def __init__(self, statement: str, parameters: Sequence[AttributeValue]) -> None:
        self.tokens = _tokens(statement)
        self.index = 0
        self.parameters = parameters
        self.bound = 0

    # -- token helpers
    @property
    def current(self) -> _Token:
        return self.tokens[self.index]

    def fail(self, expected: str) -> NotUnderstood:
        token = self.current
        found = "the end of the statement" if token.kind == "end" else repr(token.text)
        return NotUnderstood(
            f"Statement wasn't well formed, can't be processed: expected {expected} at {found} "
            f"(position {token.position}; the emulator understands DynamoDB's single-item INSERT, "
            "UPDATE, DELETE and SELECT)"
        )

    def advance(self) -> _Token:
        token = self.current
        self.index += 1
        return token

    def at_keyword(self, *keywords: str) -> bool:
        return self.current.keyword in keywords

    def at_symbol(self, *symbols: str) -> bool:
        return self.current.kind == "symbol" and self.current.text in symbols

    def keyword(self, keyword: str) -> None:
        if not self.at_keyword(keyword):
            raise self.fail(keyword)
        self.advance()

    def symbol(self, symbol: str) -> None:
        if not self.at_symbol(symbol):
            raise self.fail(repr(symbol))
        self.advance()

    # -- statements
    def statement(self) -> Statement:
        if self.at_keyword("INSERT"):
            parsed: Statement = self.insert()
        elif self.at_keyword("UPDATE"):
            parsed = self.update()
        elif self.at_keyword("DELETE"):
            parsed = self.delete()
        elif self.at_keyword("SELECT"):
            parsed = self.select()
        else:
            raise self.fail("INSERT, UPDATE, DELETE or SELECT")
        if self.at_keyword("RETURNING"):
            raise NotUnderstood("RETURNING is not in the single-item subset")
        if self.current.kind != "end":
            raise self.fail("the end of the statement")
        if self.bound != len(self.parameters):
            raise PartiQLValidationError("Number of parameters in request and statement don't match.")
        return parsed

    def insert(self) -> Insert:
        self.keyword("INSERT")
        self.keyword("INTO")
        table = self.table()
        self.keyword("VALUE")
        if not self.at_symbol("{"):
            raise self.fail("an item ({'attribute': value, ...})")
        item = self.value()
        return Insert(table, item["M"])

    def update(self) -> Update:
        self.keyword("UPDATE")
        table = self.table()
        assignments: list[tuple[Path, AttributeValue]] = []
        removals: list[Path] = []
        if not self.at_keyword("SET", "REMOVE"):
            raise self.fail("SET or REMOVE")
        while self.at_keyword("SET", "REMOVE"):
            clause = self.advance().keyword
            while True:
                path = self.path()
                if clause == "SET":
                    self.symbol("=")
                    if not self.at_value():
                        raise NotUnderstood(
                            "the single-item subset has SET <path> = <value> only (a parameter or a literal), "
                            f"not expressions, functions or other attributes in SET (at {self.current.text!r})"
                        )
                    assignments.append((path, self.value()))
                else:
                    removals.append(path)
                if not self.at_symbol(","):
                    break
                self.advance()
        self.keyword("WHERE")
        return Update(table, tuple(assignments), tuple(removals), self.condition())

    def delete(self) -> Delete:
        self.keyword("DELETE")
        self.keyword("FROM")
        table = self.table()
        self.keyword("WHERE")
        return Delete(table, self.condition())

    def select(self) -> Select:
        self.keyword("SELECT")
        projection: list[Path] = []
        if self.at_symbol("*"):
            self.advance()
        else:
            projection.append(self.path())
            while self.at_symbol(","):
                self.advance()
                projection.append(self.path())
        self.keyword("FROM")
        table = self.table()
        if self.at_symbol("."):
            raise NotUnderstood("reading an index is not in the single-item subset")
        self.keyword("WHERE")
        return Select(table, tuple(projection), self.condition())

    def table(self) -> str:
        return self.name("a table name")

    # -- paths and values
    def name(self, expected: str = "an attribute name") -> str:
        """An identifier: ``"double-quoted"`` (any text) or a bare word that is not a keyword."""
        token = self.current
        if token.kind == "quoted":
            self.advance()
            return token.text[1:-1].replace('""', '"')
        if token.kind == "word" and token.keyword is None:
            self.advance()
            return token.text
        raise self.fail(expected)

    def path(self) -> Path:
        segments: list[str | int] = [self.name()]
        while self.at_symbol(".", "["):
            if self.advance().text == ".":
                segments.append(self.name())
            else:
                token = self.current
                if token.kind != "number" or not token.text.isdigit():
                    raise self.fail("a list index")
                self.advance()
                segments.append(int(token.text))
                self.symbol("]")
        return Path(tuple(segments))

    def at_value(self) -> bool:
        token = self.current
        return (
            token.kind in ("string", "number")
            or self.at_symbol("?", "{", "[", "<<")
            or token.keyword in ("TRUE", "FALSE", "NULL")
        )

    def value(self) -> AttributeValue:
        token = self.current
        if self.at_symbol("?"):
            self.advance()
            if self.bound >= len(self.parameters):
                raise PartiQLValidationError("Number of parameters in request and statement don't match.")
            self.bound += 1
            return self.parameters[self.bound - 1]
        if token.kind == "string":
            self.advance()
            return {"S": token.text[1:-1].replace("''", "'")}
        if token.kind == "number":
            self.advance()
            return {"N": token.text}
        if token.keyword in ("TRUE", "FALSE"):
            self.advance()
            return {"BOOL": token.keyword == "TRUE"}
        if token.keyword == "NULL":
            self.advance()
            return {"NULL": True}
        if self.at_symbol("{"):
            return {"M": dict(self.elements("{", "}", self.map_entry))}
        if self.at_symbol("["):
            return {"L": list(self.elements("[", "]", self.value))}
        if self.at_symbol("<<"):
            return _set_of(list(self.elements("<<", ">>", self.value)))
        raise self.fail("a value (?, 'string', number, TRUE, FALSE, NULL, {...}, [...] or <<...>>)")

    def map_entry(self) -> tuple[str, AttributeValue]:
        token = self.current
        if token.kind != "string":
            raise self.fail("an attribute name in single quotes")
        self.advance()
        self.symbol(":")
        return token.text[1:-1].replace("''", "'"), self.value()

    def elements(self, opening: str, closing: str, element: Any) -> Iterator[Any]:
        self.symbol(opening)
        if self.at_symbol(closing):
            self.advance()
            return
        while True:
            yield element()
            if self.at_symbol(closing):
                self.advance()
                return
            self.symbol(",")

    # -- conditions
    def condition(self) -> Condition:
        return self.junction("OR", lambda: self.junction("AND", self.negation))

    def junction(self, operator: str, part: Callable[[], Condition]) -> Condition:
        """`part` (OPERATOR `part`)...: OR binds looser than AND, which binds looser than NOT."""
        parts = [part()]
        while self.at_keyword(operator):
            self.advance()
            parts.append(part())
        return parts[0] if len(parts) == 1 else Junction(operator, tuple(parts))

    def negation(self) -> Condition:
        if self.at_keyword("NOT"):
            self.advance()
            return Negation(self.negation())
        if self.at_symbol("("):
            self.advance()
            inner = self.condition()
            self.symbol(")")
            return inner
        return self.predicate()

    def operand(self) -> Path | AttributeValue:
        return self.value() if self.at_value() else self.path()

    def predicate(self) -> Condition:
        left = self.operand()
        if self.at_keyword("IS"):
            self.advance()
            negated = self.at_keyword("NOT")
            if negated:
                self.advance()
            self.keyword("MISSING")
            if not isinstance(left, Path):
                raise NotUnderstood("IS [NOT] MISSING of a value is not in the single-item subset")
            return Missing(left, negated)
        if not self.at_symbol("=", "<>", "!=", "<", "<=", ">", ">="):
            raise self.fail("a comparison (= <> < <= > >=) or IS [NOT] MISSING")
        operator = self.advance().text
        right = self.operand()
        if not isinstance(left, Path) and not isinstance(right, Path):
            raise NotUnderstood("a comparison of two values is not in the single-item subset")
        return Comparison(left, "<>" if operator == "!=" else operator, right)


def _set_of(members: list[AttributeValue]) -> AttributeValue:
    """A PartiQL ``<<...>>`` as a string, number or binary set (all members of one of those types)."""
    kinds = {next(iter(member)) for member in members}
    if len(kinds) != 1 or not kinds <= {"S", "N", "B"}:
        raise PartiQLValidationError("a set literal holds strings, numbers or binaries, all of one type, and no others")
    kind = kinds.pop()
    return {f"{kind}S": [member[kind] for member in members]}


def parse(statement: str, parameters: Sequence[AttributeValue] = ()) -> Statement:
    """`statement` with its ``?`` parameters bound in order.

    `NotUnderstood` if it is outside the single-item subset; `PartiQLValidationError` if DynamoDB refuses it.
    """
    return _Parser(statement, parameters).statement()


# ------------------------------------------------------------------- translation

_QUOTED_INDEX = re.compile(r'(?i)(\bFROM\s+)"((?:[^"]|"")*)"\s*\.\s*"((?:[^"]|"")*)"')


def for_moto(statement: str) -> str:
    """`statement` as moto's PartiQL engine reads it: an index named ``"Table"."Index"`` (the Developer
    Guide's form, ql-reference.select) as ``"Table.Index"``, the one key moto gives an index's items."""
    return _QUOTED_INDEX.sub(lambda match: f'{match[1]}"{match[2]}.{match[3]}"', statement)


def split_key(where: Condition, key_names: Sequence[str]) -> tuple[dict[str, AttributeValue], Condition | None]:
    """The item's key (an equality on every key attribute, ANDed at the top) and the rest of the condition.

    DynamoDB: the condition "must resolve to a single primary key value"; a WHERE clause
    that does not name every key attribute with ``=`` is refused.
    """
    key, rest = _key_and_rest(where, key_names)
    if set(key) != set(key_names):
        raise PartiQLValidationError("Where clause does not contain a mandatory equality on all key attributes")
    return key, rest


def _key_and_rest(where: Condition, key_names: Sequence[str]) -> tuple[dict[str, AttributeValue], Condition | None]:
    """The equalities on key attributes ANDed at the top of `where` (some or all), and the rest of it."""
    conjuncts = list(where.parts) if isinstance(where, Junction) and where.operator == "AND" else [where]
    key: dict[str, AttributeValue] = {}
    rest: list[Condition] = []
    for conjunct in conjuncts:
        equality = _key_equality(conjunct, key_names)
        if equality is None or equality[0] in key:
            rest.append(conjunct)
        else:
            key[equality[0]] = equality[1]
    if not rest:
        return key, None
    return key, rest[0] if len(rest) == 1 else Junction("AND", tuple(rest))


def _key_equality(condition: Condition, key_names: Sequence[str]) -> tuple[str, AttributeValue] | None:
    if not isinstance(condition, Comparison) or condition.operator != "=":
        return None
    for path, value in ((condition.left, condition.right), (condition.right, condition.left)):
        key_path = isinstance(path, Path) and len(path.segments) == 1 and path.attribute in key_names
        if key_path and isinstance(path, Path) and not isinstance(value, Path):
            return path.attribute, value
    return None


class _Expression:
    """Expression attribute names and values, allocated as a request's expressions are written."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.values: dict[str, AttributeValue] = {}

    def name(self, attribute: str) -> str:
        for placeholder, known in self.names.items():
            if known == attribute:
                return placeholder
        placeholder = f"#n{len(self.names)}"
        self.names[placeholder] = attribute
        return placeholder

    def path(self, path: Path) -> str:
        text = ""
        for segment in path.segments:
            text += f"[{segment}]" if isinstance(segment, int) else ("." if text else "") + self.name(segment)
        return text

    def value(self, value: AttributeValue) -> str:
        placeholder = f":v{len(self.values)}"
        self.values[placeholder] = value
        return placeholder

    def operand(self, operand: Path | AttributeValue) -> str:
        return self.path(operand) if isinstance(operand, Path) else self.value(operand)

    def condition(self, condition: Condition) -> str:
        if isinstance(condition, Comparison):
            return f"{self.operand(condition.left)} {condition.operator} {self.operand(condition.right)}"
        if isinstance(condition, Missing):
            function = "attribute_exists" if condition.negated else "attribute_not_exists"
            return f"{function}({self.path(condition.path)})"
        if isinstance(condition, Negation):
            return f"NOT ({self.condition(condition.inner)})"
        return f" {condition.operator} ".join(f"({self.condition(part)})" for part in condition.parts)

    def into(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.names:
            request["ExpressionAttributeNames"] = self.names
        if self.values:
            request["ExpressionAttributeValues"] = self.values
        return request


def item_key(statement: Statement, key_names: Sequence[str]) -> dict[str, AttributeValue]:
    """The primary key of the one item `statement` reads or writes."""
    if isinstance(statement, Insert):
        missing = [name for name in key_names if name not in statement.item]
        if missing:
            raise PartiQLValidationError(
                f"One or more parameter values were invalid: Missing the key {missing[0]} in the item"
            )
        return {name: statement.item[name] for name in key_names}
    return split_key(statement.where, key_names)[0]


def names_one_item(statement: Statement, key_names: Sequence[str]) -> bool:
    """Whether `statement` names one item: an INSERT, or a WHERE clause with an equality on every key attribute."""
    return isinstance(statement, Insert) or set(_key_and_rest(statement.where, key_names)[0]) == set(key_names)


def _read_request(statement: Select, key_names: Sequence[str], expression: _Expression) -> tuple[str, dict[str, Any]]:
    """A GetItem (the full key, nothing else) or a Query (the partition key, and anything else as a filter)."""
    if any(len(path.segments) > 1 for path in statement.projection):
        raise NotUnderstood("a projection of nested paths is not in the single-item subset")
    key, rest = _key_and_rest(statement.where, key_names)
    if key_names[0] not in key:
        raise NotUnderstood("a read without an equality on the partition key is not in the single-item subset")
    request: dict[str, Any] = {"TableName": statement.table}
    if statement.projection:
        request["ProjectionExpression"] = ", ".join(expression.path(path) for path in statement.projection)
    if set(key) == set(key_names) and rest is None:
        request["Key"] = key
        return "GetItem", expression.into(request)
    request["KeyConditionExpression"] = " AND ".join(
        f"{expression.name(name)} = {expression.value(value)}" for name, value in key.items()
    )
    if rest is not None:
        request["FilterExpression"] = expression.condition(rest)
    return "Query", expression.into(request)


def item_request(statement: Statement, key_names: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """The DynamoDB operation and request body doing exactly what `statement` does.

    `key_names`: the table's partition key name, then its sort key name if it has one.
    INSERT: PutItem if the key is not there; UPDATE: UpdateItem of an existing item that
    satisfies the rest of the WHERE clause; DELETE: DeleteItem, of a missing item (a no-op)
    or of one that satisfies the rest; SELECT: GetItem by the full key, or a Query of the
    partition (and sort) key equalities filtered by the rest of the WHERE clause (DynamoDB's
    PartiQL reads a partition with a Query). `NotUnderstood` for a SELECT of anything else.
    """
    expression = _Expression()
    if isinstance(statement, Insert):
        item_key(statement, key_names)
        condition = f"attribute_not_exists({expression.name(key_names[0])})"
        return "PutItem", expression.into(
            {"TableName": statement.table, "Item": statement.item, "ConditionExpression": condition}
        )
    if isinstance(statement, Select):
        return _read_request(statement, key_names, expression)
    key, rest = split_key(statement.where, key_names)
    request = {"TableName": statement.table, "Key": key}
    if isinstance(statement, Update):
        clauses = []
        if statement.assignments:
            assignments = (
                f"{expression.path(path)} = {expression.value(value)}" for path, value in statement.assignments
            )
            clauses.append("SET " + ", ".join(assignments))
        if statement.removals:
            clauses.append("REMOVE " + ", ".join(expression.path(path) for path in statement.removals))
        request["UpdateExpression"] = " ".join(clauses)
        exists = f"attribute_exists({expression.name(key_names[0])})"
        request["ConditionExpression"] = exists if rest is None else f"{exists} AND ({expression.condition(rest)})"
        return "UpdateItem", expression.into(request)
    if rest is not None:
        missing = f"attribute_not_exists({expression.name(key_names[0])})"
        request["ConditionExpression"] = f"{missing} OR ({expression.condition(rest)})"
    return "DeleteItem", expression.into(request)
