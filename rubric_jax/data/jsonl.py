"""JSONL prompt files: parsing, validation and the `PromptRecord` type (schema in data/__init__.py)."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from rubric_jax.errors import UserError, did_you_mean

BUNDLED = ("creative_writing", "health", "scripts", "scripts_test")
_KEYS = ("id", "prompt", "task", "rubric", "constraints", "system", "meta")
_IFEVAL_KEYS = ("key", "instruction_id_list", "kwargs")  # an official IFEval line loads as it is


class DataError(UserError):
    """A prompt file is malformed. The message starts with ``<file>:<line>:`` when a line is at fault."""


@dataclasses.dataclass(frozen=True)
class PromptRecord:
    """One training prompt. Field meanings are documented in `rubric_jax.data`."""

    id: str
    prompt: str
    task: str | None = None
    rubric: str | dict[str, Any] | None = None
    constraints: tuple[dict[str, Any], ...] = ()
    system: str | None = None
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object for this record (optional fields left out when unset)."""
        d: dict[str, Any] = {"id": self.id, "prompt": self.prompt}
        if self.task is not None:
            d["task"] = self.task
        if self.rubric is not None:
            d["rubric"] = self.rubric
        if self.constraints:
            d["constraints"] = [dict(c) for c in self.constraints]
        if self.system is not None:
            d["system"] = self.system
        if self.meta:
            d["meta"] = dict(self.meta)
        return d

    def load_rubric(self):
        """The record's rubric as a `rubric_jax.rubrics.Rubric`, or None when it names none."""
        from rubric_jax.rubrics import Rubric, load_rubric

        if self.rubric is None:
            return None
        if isinstance(self.rubric, str):
            return load_rubric(self.rubric)
        return Rubric.from_dict(self.rubric)


def _fail(where: str, msg: str) -> None:
    raise DataError(f"{where}: {msg}")


def _opt_str(obj: Mapping[str, Any], key: str, where: str) -> str | None:
    v = obj.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or not v.strip():
        _fail(where, f'"{key}" must be a non-empty string, got {type(v).__name__} {v!r:.60}')
    return v


def parse_record(obj: Any, where: str, default_id: str) -> PromptRecord:
    """Validate one decoded JSON value and build its record; `where` prefixes error messages."""
    if not isinstance(obj, dict):
        _fail(where, f"expected a JSON object, got {type(obj).__name__}")
    if "instruction_id_list" in obj:
        obj = _from_ifeval(obj, where)
    unknown = sorted(set(obj) - set(_KEYS))
    if "prompt" not in obj:  # before unknown keys: a misnamed prompt ("text", "question") is the likelier slip
        _fail(where, f'missing required key "prompt" (the line has keys {sorted(obj)})')
    if unknown:
        _fail(where, f"unknown key(s) {unknown}; allowed keys are {list(_KEYS)}" + did_you_mean(unknown[0], _KEYS))
    prompt = obj["prompt"]
    if not isinstance(prompt, str):
        _fail(where, f'"prompt" must be a string, got {type(prompt).__name__}')
    if not prompt.strip():
        _fail(where, '"prompt" is empty')

    rid = _opt_str(obj, "id", where) if "id" in obj else default_id
    if rid is None:
        _fail(where, '"id" must be a non-empty string, got null')
    task = _opt_str(obj, "task", where)
    system = _opt_str(obj, "system", where)

    rubric = obj.get("rubric")
    if rubric is not None:
        if isinstance(rubric, str):
            if not rubric.strip():
                _fail(where, '"rubric" is an empty string')
        elif isinstance(rubric, dict):
            from rubric_jax.rubrics import Rubric, RubricError

            try:
                Rubric.from_dict(rubric)
            except (RubricError, TypeError, ValueError) as e:
                _fail(where, f'invalid inline "rubric": {e}')
        else:
            _fail(where, f'"rubric" must be a rubric name (string) or an inline rubric object, '
                         f"got {type(rubric).__name__}")

    raw_constraints = obj.get("constraints")
    constraints: tuple[dict[str, Any], ...] = ()
    if raw_constraints is not None:
        if not isinstance(raw_constraints, list):
            _fail(where, f'"constraints" must be a list of objects, got {type(raw_constraints).__name__}')
        for k, c in enumerate(raw_constraints):
            if not isinstance(c, dict):
                _fail(where, f"constraints[{k}] must be an object, got {type(c).__name__}")
            t = c.get("type")
            if not isinstance(t, str) or not t.strip():
                _fail(where, f'constraints[{k}] needs a non-empty string "type"')
        constraints = tuple(dict(c) for c in raw_constraints)

    meta = obj.get("meta")
    if meta is None:
        meta = {}
    elif not isinstance(meta, dict):
        _fail(where, f'"meta" must be an object, got {type(meta).__name__}')

    return PromptRecord(id=rid, prompt=prompt, task=task, rubric=rubric,
                        constraints=constraints, system=system, meta=dict(meta))


def _from_ifeval(obj: dict, where: str) -> dict:
    """An IFEval line ({"key", "prompt", "instruction_id_list", "kwargs"}) as a record: id = str(key), one
    constraint {"type": <instruction id>, <its kwargs without nulls>} per instruction (checked when a run
    verifies them)."""
    ids, kwargs = obj.get("instruction_id_list"), obj.get("kwargs", [{}] * len(obj.get("instruction_id_list") or []))
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        _fail(where, '"instruction_id_list" must be a list of strings')
    if not isinstance(kwargs, list) or len(kwargs) != len(ids) or not all(isinstance(k, dict) for k in kwargs):
        _fail(where, f'"kwargs" must be a list of {len(ids)} objects, one per instruction id')
    out = {k: v for k, v in obj.items() if k not in _IFEVAL_KEYS}
    if "key" in obj and "id" not in obj:
        out["id"] = str(obj["key"])
    out["constraints"] = list(obj.get("constraints") or []) + [
        {"type": i, **{k: v for k, v in kw.items() if v is not None}} for i, kw in zip(ids, kwargs)]
    return out


def parse_jsonl(text: str, source: str = "<string>") -> list[PromptRecord]:
    """Parse JSONL text; `source` names the file in errors and gives the default-id stem."""
    stem = os.path.splitext(os.path.basename(source))[0] or "record"
    records: list[PromptRecord] = []
    seen: dict[str, int] = {}
    # split on "\n" only: str.splitlines also breaks at U+2028, U+0085 and the like, which JSON strings may hold
    # raw, so a valid line would be cut in two and the line numbers would not match an editor's
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{source}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{where}: malformed JSON: {e.msg} (column {e.colno})") from None
        rec = parse_record(obj, where, default_id=f"{stem}-{lineno}")
        if rec.id in seen:
            _fail(where, f'duplicate id "{rec.id}" (first used on line {seen[rec.id]})')
        seen[rec.id] = lineno
        records.append(rec)
    if not records:
        raise DataError(f"{source}: no records (the file is empty)")
    return records


def bundled_path(name: str):
    """The importlib.resources handle of a bundled prompt file (a name in `BUNDLED`)."""
    from importlib import resources

    return resources.files("rubric_jax.data") / f"{name}.jsonl"


def load_jsonl(path_or_name: str | os.PathLike) -> list[PromptRecord]:
    """Load and validate a JSONL prompt file, or a bundled set by name (see `BUNDLED`)."""
    s = os.fspath(path_or_name)
    if s in BUNDLED:
        text = bundled_path(s).read_text(encoding="utf-8")
        return parse_jsonl(text, source=f"{s}.jsonl")
    if not os.path.isfile(s):
        raise DataError(f"{s}: no such file and not a bundled prompt set (bundled: {list(BUNDLED)})")
    with open(s, "rb") as f:
        raw = f.read()
    return parse_jsonl(decode(raw, s), source=s)


def decode(raw: bytes, source: str) -> str:
    """A prompt file's bytes as text: UTF-8, a leading byte-order mark dropped; other bytes are a DataError
    naming the line and the byte (a bare UnicodeDecodeError names neither the file nor the line)."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        start = e.start + (3 if raw.startswith(b"\xef\xbb\xbf") else 0)
        line_start = raw.rfind(b"\n", 0, start) + 1
        lineno = raw.count(b"\n", 0, start) + 1
        raise DataError(f"{source}:{lineno}: not UTF-8 text (byte 0x{raw[start]:02x} at byte {start - line_start + 1} "
                        f"of the line, {e.reason}); save the file as UTF-8") from None
