"""Aggregate keys: one per node of the hierarchy, from the root level down; and the one rule
for what the hierarchy levels may be.

A trade with hierarchy (Delta, FXSpot, AMER) contributes to three nodes:
`Delta`, `Delta:FXSpot` and `Delta:FXSpot:AMER`. Level values may not contain
`:` (message validation rejects it), so keys never collide.
"""

from collections.abc import Sequence

from aggregation.names import MAX_NODE_PREFIX_BYTES

DEFAULT_HIERARCHY_LEVELS: tuple[str, ...] = ("RiskType", "TradeDesk", "Region")
KEY_SEPARATOR = ":"
LEVEL_LIST_SEPARATOR = ","
"""How the functions' `HIERARCHY_LEVELS` variable joins the level names."""
MAX_LEVEL_NAME_LENGTH = 128

MAX_LEVEL_VALUE_BYTES = 128
"""A level value's limit, in UTF-8 bytes (so at most 128 characters, as docs/design.md says,
and fewer when they are not ASCII). Counted in bytes because the values become
DynamoDB keys: an aggregate key joins one value per level and must stay under the
2048-byte partition-key limit, and a map batch's delta item, which holds up to
2 x levels keys per record, under the 400 KB item limit (`aggregation.item_size`)."""
DYNAMODB_MAX_KEY_BYTES = 2048
MAX_HIERARCHY_LEVELS = (DYNAMODB_MAX_KEY_BYTES - MAX_NODE_PREFIX_BYTES + len(KEY_SEPARATOR)) // (
    MAX_LEVEL_VALUE_BYTES + len(KEY_SEPARATOR)
)
"""15: the deepest aggregate key, every value at its limit, fits a DynamoDB partition key with
the node prefix and slice in front of it (`aggregation.aggregate_items`)."""


def hierarchy_levels_violation(levels: Sequence[object]) -> str | None:
    """What `levels` must be and is not (completing "the levels must be ..."), or None when valid.

    The one rule, applied by the stack at synthesis (`stacks/settings.py`) and by the functions
    to their `HIERARCHY_LEVELS` variable (`parse_hierarchy_levels`), so that a setting either
    passes both or is refused at synthesis: a name is taken exactly as written, never trimmed,
    because a message's `Hierarchy` is looked up by it. (Trimming in one place only made
    `"RiskType "` pass synthesis and then quarantine every message, and `[" "]` silently mean
    the default levels.)
    """
    if not levels:
        return "a non-empty list of level names"
    for level in levels:
        if not isinstance(level, str) or not 1 <= len(level) <= MAX_LEVEL_NAME_LENGTH:
            return f"level names of 1 to {MAX_LEVEL_NAME_LENGTH} characters"
        if level != level.strip():
            return "level names without surrounding whitespace"
        if KEY_SEPARATOR in level or LEVEL_LIST_SEPARATOR in level:
            return f"level names with no '{KEY_SEPARATOR}' or '{LEVEL_LIST_SEPARATOR}'"
    if len(set(levels)) != len(levels):
        return "distinct level names"
    if len(levels) > MAX_HIERARCHY_LEVELS:
        # The deepest aggregate key joins one value (up to 128 bytes) per level.
        return f"at most {MAX_HIERARCHY_LEVELS} levels (DynamoDB's {DYNAMODB_MAX_KEY_BYTES}-byte key)"
    return None


def parse_hierarchy_levels(setting: str) -> tuple[str, ...]:
    """The `HIERARCHY_LEVELS` variable (`"RiskType,TradeDesk,Region"`, as the stack writes it) as a tuple.

    Raises ValueError naming the variable when the levels break `hierarchy_levels_violation`.
    """
    levels = tuple(setting.split(LEVEL_LIST_SEPARATOR))
    violation = hierarchy_levels_violation(levels)
    if violation is not None:
        raise ValueError(f"HIERARCHY_LEVELS={setting!r}: the levels must be {violation}")
    return levels


def aggregate_keys(path: Sequence[str]) -> list[str]:
    """Keys of the leaf node and all its ancestors, root first."""
    return [KEY_SEPARATOR.join(path[: depth + 1]) for depth in range(len(path))]


def hierarchy_path(hierarchy: dict[str, str], levels: Sequence[str]) -> tuple[str, ...]:
    """The hierarchy's values in the configured level order."""
    missing = [level for level in levels if level not in hierarchy]
    if missing:
        raise ValueError(f"hierarchy lacks level(s) {', '.join(missing)}")
    return tuple(hierarchy[level] for level in levels)
