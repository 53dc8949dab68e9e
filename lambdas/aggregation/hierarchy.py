"""Aggregate keys: one per node of the hierarchy, from the root level down.

A trade with hierarchy (Delta, FXSpot, AMER) contributes to three nodes:
`Delta`, `Delta:FXSpot` and `Delta:FXSpot:AMER`. Level values may not contain
`:` (message validation rejects it), so keys never collide.
"""

from collections.abc import Sequence

DEFAULT_HIERARCHY_LEVELS: tuple[str, ...] = ("RiskType", "TradeDesk", "Region")
KEY_SEPARATOR = ":"


def parse_hierarchy_levels(setting: str) -> tuple[str, ...]:
    """The `HIERARCHY_LEVELS` setting (`"RiskType,TradeDesk,Region"`) as a tuple."""
    levels = tuple(level.strip() for level in setting.split(",") if level.strip())
    if not levels:
        raise ValueError("HIERARCHY_LEVELS names no level")
    if len(set(levels)) != len(levels):
        raise ValueError(f"HIERARCHY_LEVELS repeats a level: {setting!r}")
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
