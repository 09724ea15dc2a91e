"""Rubric and criterion types, their JSON form, and validation.

A `Rubric` is an ordered tuple of `Criterion`s. The order matters: for RcRL it is the curriculum
order, for RARE it fixes the column order of the score matrix s_gc (docs/method.md).

Every criterion defines an integer scale 0..max_points and one text per level, so the pointwise
judge (score in {0..m_j}) and the pairwise judge (only `name` and `check` are shown) can share
one type. A pairwise-only criterion gets the default binary scale (max_points = 1, levels
"not met" / "met").

JSON form (one object per rubric)::

    {"name": "creative_writing", "version": 1, "description": "...",
     "criteria": [{"id": "prompt_alignment", "name": "Prompt Alignment",
                   "check": "...", "max_points": 4, "polarity": "positive",
                   "levels": ["<score 0>", "<score 1>", "...", "<score 4>"]}]}

`levels[k]` describes score k. A criterion with `"scoring": "binary"` is scored 0 or max_points and nothing
in between (RARE's initial per-query criteria): it has two levels, for 0 and for max_points. Validation errors are `RubricError` (a ValueError) whose message
starts with the path of the offending field, e.g. ``criteria[3].levels: ...``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

POLARITIES = ("positive", "negative", "mixed")
DEFAULT_BINARY_LEVELS = (
    "Not met: the response does not satisfy this criterion.",
    "Met: the response satisfies this criterion.",
)

SCORINGS = ("levels", "binary")
_CRITERION_KEYS = ("id", "name", "check", "levels", "max_points", "polarity", "scoring")
_RUBRIC_KEYS = ("name", "version", "description", "criteria")


class RubricError(ValueError):
    """Invalid rubric or criterion; the message names the offending field path."""


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _fail(path: str, msg: str) -> None:
    raise RubricError(f"{path}: {msg}")


def _check_str(value: Any, path: str, *, allow_empty: bool = False) -> None:
    if not isinstance(value, str):
        _fail(path, f"expected a string, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        _fail(path, "must be a non-empty string")


def _validate_criterion_fields(
    id: Any, name: Any, check: Any, levels: Any, max_points: Any, polarity: Any, path: str,
    scoring: Any = "levels",
) -> None:
    _check_str(id, f"{path}.id")
    _check_str(name, f"{path}.name")
    _check_str(check, f"{path}.check")
    if not _is_int(max_points):
        _fail(f"{path}.max_points", f"expected an integer, got {type(max_points).__name__}")
    if max_points < 1:
        _fail(f"{path}.max_points", f"must be >= 1, got {max_points}")
    if scoring not in SCORINGS:
        _fail(f"{path}.scoring", f"unknown scoring {scoring!r}; expected one of {SCORINGS}")
    if not isinstance(levels, (list, tuple)):
        _fail(f"{path}.levels", f"expected a list of strings, got {type(levels).__name__}")
    if scoring == "binary":
        if len(levels) != 2:
            _fail(f"{path}.levels", f"a binary criterion has 2 level descriptions (0 and {max_points}), "
                                    f"got {len(levels)}")
    elif len(levels) != max_points + 1:
        _fail(
            f"{path}.levels",
            f"expected {max_points + 1} level descriptions (0..{max_points}), got {len(levels)}",
        )
    for k, text in enumerate(levels):
        _check_str(text, f"{path}.levels[{k}]")
    if not isinstance(polarity, str):
        _fail(f"{path}.polarity", f"expected a string, got {type(polarity).__name__}")
    if polarity not in POLARITIES:
        _fail(f"{path}.polarity", f"unknown polarity {polarity!r}; expected one of {POLARITIES}")


@dataclasses.dataclass(frozen=True)
class Criterion:
    """One rubric criterion.

    id:         stable identifier (kept across RARE replacements).
    name:       short human-readable title (shown to the pairwise judge).
    check:      what the judge checks, as one question or statement.
    levels:     levels[k] describes score k, for every k in 0..max_points.
    max_points: top of the integer scale (m_j in RARE).
    polarity:   "positive" (full marks when a quality is fully present), "negative" (full marks
                when a flaw is absent) or "mixed".
    scoring:    "levels" (any integer 0..max_points; levels[k] describes k) or "binary" (0 or
                max_points only; levels = (text for 0, text for max_points)).
    """

    id: str
    name: str
    check: str
    levels: tuple[str, ...] | None = None
    max_points: int = 1
    polarity: str = "positive"
    scoring: str = "levels"

    @property
    def scores(self) -> tuple[int, ...]:
        """The integer scores a judge may give: 0..max_points, or (0, max_points) when binary."""
        return (0, self.max_points) if self.scoring == "binary" else tuple(range(self.max_points + 1))

    def level_text(self, score: int) -> str:
        """The description of one allowed score."""
        return self.levels[self.scores.index(score)]

    def __post_init__(self) -> None:
        levels = self.levels
        if levels is None:
            if self.scoring == "binary":
                levels = DEFAULT_BINARY_LEVELS
            elif self.max_points != 1:
                _fail(
                    f"criterion {self.id!r}.levels",
                    f"must be given when max_points != 1 (max_points={self.max_points})",
                )
            levels = DEFAULT_BINARY_LEVELS
        if isinstance(levels, list):
            levels = tuple(levels)
        object.__setattr__(self, "levels", levels)
        _validate_criterion_fields(
            self.id, self.name, self.check, levels, self.max_points, self.polarity,
            f"criterion {self.id!r}" if isinstance(self.id, str) else "criterion", self.scoring,
        )

    @classmethod
    def from_dict(cls, d: Any, path: str = "criterion") -> Criterion:
        if not isinstance(d, Mapping):
            _fail(path, f"expected an object, got {type(d).__name__}")
        unknown = sorted(set(d) - set(_CRITERION_KEYS))
        if unknown:
            _fail(f"{path}.{unknown[0]}", f"unknown field; allowed fields are {_CRITERION_KEYS}")
        for key in ("id", "name", "check"):
            if key not in d:
                _fail(f"{path}.{key}", "missing required field")
        max_points = d.get("max_points", 1)
        scoring = d.get("scoring", "levels")
        levels = d.get("levels")
        if levels is None:
            if "max_points" in d and max_points != 1 and scoring != "binary":
                _fail(f"{path}.levels", "missing required field (needed when max_points != 1)")
            levels = DEFAULT_BINARY_LEVELS
        polarity = d.get("polarity", "positive")
        _validate_criterion_fields(
            d["id"], d["name"], d["check"], levels, max_points, polarity, path, scoring
        )
        return cls(
            id=d["id"], name=d["name"], check=d["check"], levels=tuple(levels),
            max_points=max_points, polarity=polarity, scoring=scoring,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "check": self.check,
            "max_points": self.max_points,
            "polarity": self.polarity,
            "levels": list(self.levels),
        } | ({"scoring": self.scoring} if self.scoring != "levels" else {})


@dataclasses.dataclass(frozen=True)
class Rubric:
    """An ordered set of criteria with unique ids.

    version starts at 1 and is bumped by every accepted revision (`replace_criteria`).
    """

    name: str
    criteria: tuple[Criterion, ...]
    version: int = 1
    description: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "criteria", tuple(self.criteria))
        _check_str(self.name, "name")
        if not _is_int(self.version) or self.version < 0:
            _fail("version", f"expected a non-negative integer, got {self.version!r}")
        _check_str(self.description, "description", allow_empty=True)
        if not self.criteria:
            _fail("criteria", "must contain at least one criterion")
        seen: dict[str, int] = {}
        for k, c in enumerate(self.criteria):
            if not isinstance(c, Criterion):
                _fail(f"criteria[{k}]", f"expected a Criterion, got {type(c).__name__}")
            if c.id in seen:
                _fail(f"criteria[{k}].id", f"duplicated id {c.id!r} (first used by criteria[{seen[c.id]}])")
            seen[c.id] = k

    # ---- views -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.criteria)

    def __iter__(self):
        return iter(self.criteria)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(c.id for c in self.criteria)

    @property
    def max_points(self) -> tuple[int, ...]:
        """m_c per criterion, in order (feed as `max_c` to the reward functions)."""
        return tuple(c.max_points for c in self.criteria)

    @property
    def total_points(self) -> int:
        return sum(self.max_points)

    def index(self, criterion_id: str) -> int:
        for k, c in enumerate(self.criteria):
            if c.id == criterion_id:
                return k
        raise RubricError(f"criteria: no criterion with id {criterion_id!r}; ids are {self.ids}")

    def __getitem__(self, key: int | str) -> Criterion:
        if isinstance(key, str):
            return self.criteria[self.index(key)]
        return self.criteria[key]

    # ---- derived rubrics ---------------------------------------------------------------------
    def replace_criteria(
        self, replacements: Mapping[str, Criterion], *, bump_version: bool = True
    ) -> Rubric:
        """Copy with some criteria swapped out, each in place (RARE replacement).

        Each replacement must keep the replaced criterion's id and max_points (so the reward
        denominator sum_j m_j and the column order stay fixed); otherwise RubricError.
        The version goes up by one per call (not per criterion).
        """
        new = list(self.criteria)
        for cid, crit in replacements.items():
            k = self.index(cid)
            path = f"replacement[{cid!r}]"
            if not isinstance(crit, Criterion):
                _fail(path, f"expected a Criterion, got {type(crit).__name__}")
            if crit.id != cid:
                _fail(f"{path}.id", f"must keep the replaced id {cid!r}, got {crit.id!r}")
            if crit.max_points != self.criteria[k].max_points:
                _fail(
                    f"{path}.max_points",
                    f"must keep max_points={self.criteria[k].max_points}, got {crit.max_points}",
                )
            new[k] = crit
        return dataclasses.replace(
            self, criteria=tuple(new), version=self.version + (1 if bump_version else 0)
        )

    def replace_criterion(self, criterion_id: str, new: Criterion, **kw: Any) -> Rubric:
        """`replace_criteria` for a single criterion."""
        return self.replace_criteria({criterion_id: new}, **kw)

    def reordered(self, order: Any) -> Rubric:
        """Copy whose k-th criterion is `self.criteria[order[k]]` (e.g. `permute_order`)."""
        order = [int(i) for i in order]
        if sorted(order) != list(range(len(self))):
            _fail("order", f"must be a permutation of 0..{len(self) - 1}, got {order}")
        return dataclasses.replace(self, criteria=tuple(self.criteria[i] for i in order))

    # ---- JSON --------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: Any) -> Rubric:
        if not isinstance(d, Mapping):
            _fail("rubric", f"expected an object, got {type(d).__name__}")
        unknown = sorted(set(d) - set(_RUBRIC_KEYS))
        if unknown:
            _fail(unknown[0], f"unknown field; allowed fields are {_RUBRIC_KEYS}")
        for key in ("name", "criteria"):
            if key not in d:
                _fail(key, "missing required field")
        _check_str(d["name"], "name")
        version = d.get("version", 1)
        if not _is_int(version) or version < 0:
            _fail("version", f"expected a non-negative integer, got {version!r}")
        description = d.get("description", "")
        _check_str(description, "description", allow_empty=True)
        raw = d["criteria"]
        if not isinstance(raw, list):
            _fail("criteria", f"expected a list, got {type(raw).__name__}")
        criteria = tuple(Criterion.from_dict(c, f"criteria[{k}]") for k, c in enumerate(raw))
        return cls(name=d["name"], criteria=criteria, version=version, description=description)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "version": self.version}
        if self.description:
            out["description"] = self.description
        out["criteria"] = [c.to_dict() for c in self.criteria]
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str = "<string>") -> Rubric:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise RubricError(
                f"{source}: line {e.lineno}, column {e.colno}: malformed JSON: {e.msg}"
            ) from None
        try:
            return cls.from_dict(data)
        except RubricError as e:
            raise RubricError(f"{source}: {e}") from None


def save_rubric(rubric: Rubric, path: str | os.PathLike) -> None:
    """Write `rubric` as indented UTF-8 JSON (round-trips through `load_rubric`)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(rubric.to_json())


def builtin_rubric_names() -> tuple[str, ...]:
    """Names accepted by `load_rubric` without a path (files in rubrics/builtin/)."""
    from importlib import resources

    root = resources.files("rubric_jax.rubrics") / "builtin"
    return tuple(sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".json")))


def load_rubric(path_or_name: str | os.PathLike) -> Rubric:
    """Load a built-in rubric by name ("creative_writing", "health") or a JSON file by path."""
    from importlib import resources

    s = os.fspath(path_or_name)
    if s in builtin_rubric_names():
        res = resources.files("rubric_jax.rubrics") / "builtin" / f"{s}.json"
        return Rubric.from_json(res.read_text(encoding="utf-8"), source=f"builtin:{s}.json")
    if not os.path.isfile(s):
        raise RubricError(
            f"{s}: no such file and not a built-in rubric (built-ins: {builtin_rubric_names()})"
        )
    with open(s, encoding="utf-8") as f:
        text = f.read()
    return Rubric.from_json(text, source=s)
