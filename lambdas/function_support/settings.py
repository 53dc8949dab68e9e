"""Typed access to the functions' environment (docs/architecture.md, "Function environment")."""

import os

from aggregation.hierarchy import DEFAULT_HIERARCHY_LEVELS, parse_hierarchy_levels
from aggregation.value_domain import DEFAULT_VALUE_DOMAIN, ValueDomain

SECONDS_PER_DAY = 86_400


def required_setting(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise RuntimeError(f"environment variable {name} is not set")
    return value


def optional_setting(name: str, default: str) -> str:
    return os.environ.get(name, "").strip() or default


def int_setting(name: str, default: int, *, minimum: int) -> int:
    """An integer variable of at least `minimum`; `default` when unset."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < minimum:
        raise RuntimeError(f"environment variable {name}={raw!r} is not an integer of at least {minimum}")
    return int(raw)


def positive_int_setting(name: str, default: int) -> int:
    return int_setting(name, default, minimum=1)


def hierarchy_levels() -> tuple[str, ...]:
    """`HIERARCHY_LEVELS` exactly as the stack wrote it (never trimmed: the rule is the one synthesis
    applied, `aggregation.hierarchy.hierarchy_levels_violation`); the default levels only when unset."""
    raw = os.environ.get("HIERARCHY_LEVELS")
    return DEFAULT_HIERARCHY_LEVELS if raw is None else parse_hierarchy_levels(raw)


def value_domain() -> ValueDomain:
    """The aggregatable domain of Values (`VALUE_INTEGER_DIGITS`, `VALUE_FRACTION_DIGITS`)."""
    return ValueDomain(
        positive_int_setting("VALUE_INTEGER_DIGITS", DEFAULT_VALUE_DOMAIN.integer_digits),
        int_setting("VALUE_FRACTION_DIGITS", DEFAULT_VALUE_DOMAIN.fraction_digits, minimum=0),
    )


def ttl_seconds(name: str, default_days: int) -> int:
    """A `*_TTL_DAYS` setting in seconds."""
    return positive_int_setting(name, default_days) * SECONDS_PER_DAY
