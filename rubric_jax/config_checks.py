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




# Names this release changed, still read for one release: old field -> new field. Each use logs a deprecation
# warning (`apply_renames`, the first thing rubric_jax.rl.preflight.check does).
RENAMED = {
    "reward.judging": "reward.method",  # it names the reward method (rare, rlmr, ...), not only how to judge
    "judge.pairing='listwise'": "judge.comparison='listwise'",  # a whole-group sequence is no pairing of responses
}
DEFAULT_METHOD = "pairwise"


def apply_renames(config) -> list[str]:
    """Moves a value given under an old name (`RENAMED`) to its new field, in place, and returns one deprecation
    message per move. Giving both names with different values is an error, not a silent choice."""
    notes = []
    reward, judge = config.get("reward"), config.get("judge")
    old = reward.get("judging") if reward is not None else None
    if old is not None:
        if reward.get("method", DEFAULT_METHOD) not in (old, DEFAULT_METHOD):
            fail("reward.judging", old, f"is the old name of reward.method, which says {reward.method!r}: set "
                                        "reward.method only")
        reward.method, reward.judging = old, None
        notes.append(f"config.reward.judging is deprecated and will be removed in the next release: "
                     f"use config.reward.method={old!r}")
    if judge is not None and judge.get("pairing") == "listwise":
        judge.comparison, judge.pairing = "listwise", "all"
        notes.append("config.judge.pairing='listwise' is deprecated and will be removed in the next release: use "
                     "config.judge.comparison='listwise' (judge.pairing schedules the pairs of pairwise judging)")
    return notes
