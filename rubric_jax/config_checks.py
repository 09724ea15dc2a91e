"""The small checks a config value goes through, shared by rubric_jax.rl.preflight and each reward method's own
`validate` (rubric_jax.methods): each raises `ConfigError` naming the field (`config.loss.aggregation`), what it
holds and what is allowed (with the closest allowed name to a misspelled one)."""

from __future__ import annotations

import math
from typing import Any, Callable

from rubric_jax.errors import UserError, did_you_mean


class ConfigError(UserError):
    """A config value (or the --workdir flag) that cannot run; the message starts with the field's full name."""


def fail(field: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"config.{field}={value!r}: {allowed}")


def field_value(config, field: str):
    node = config
    for part in field.split("."):
        node = node[part]
    return node


def integer(config, field: str, lo: int, what: str = "") -> None:
    v = field_value(config, field)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        fail(field, v, f"must be an integer >= {lo}{what}")


def number(config, field: str, ok: Callable[[float], bool], allowed: str) -> None:
    v = field_value(config, field)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not ok(v):
        fail(field, v, allowed)


def choice(config, field: str, choices) -> None:
    v = field_value(config, field)
    if v not in choices:
        fail(field, v, f"must be one of {tuple(choices)}" + (did_you_mean(v, choices) if isinstance(v, str) else ""))


def section(config, field: str, build: Callable[[], Any]):
    """Builds a component's config dataclass and returns it; its own error gets the section's name in front."""
    try:
        return build()
    except (ValueError, TypeError) as e:
        raise ConfigError(f"config.{field}: {e}") from e


