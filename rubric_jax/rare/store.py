"""The rubric store: each query's current rubric, with every accepted revision and its history.

RARE ("RARE: Reinforcement Learning with Adaptive Rubric Evolution for Open-Ended Generation", section 3 and
the appendix on sample-level updates): an accepted replacement changes the query's rubric for the current
update and for every later visit to the query. The store therefore lives in the checkpoint (its `state()` is
the checkpoint meta's "rubrics" key) and is exported as JSONL (`export_jsonl`) so a user can read how each
query's rubric evolved.

Where a query's first rubric comes from (`source`):
  "record"  the record's own rubric (inline or a path), else the run's `default` rubric;
  "task"    the shared rubric named by the record's `task` (e.g. "script_live_action"), else `default`;
  "config"  always `default`.

Every process applies the same pooled events in the same order, so the stores of a multi-process run agree.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

from rubric_jax.rubrics import Criterion, Rubric, load_rubric

SOURCES = ("config", "record", "task")
STATE_VERSION = 1


class RubricStore:
    def __init__(self, default: Rubric | None, source: str = "record"):
        if source not in SOURCES:
            raise ValueError(f"rubric_source must be one of {SOURCES}, got {source!r}")
        self.default, self.source = default, source
        self._initial: dict[str, Rubric] = {}
        self._current: dict[str, Rubric] = {}  # revised queries only
        self._history: dict[str, list[dict]] = {}

    # ---- lookup ----------------------------------------------------------------------------------
    def key(self, record) -> str:
        """The store key of a record: its id, or its task's shared rubric under source="task"."""
        if self.source == "task":
            return f"task:{record.task or '<default>'}"
        return str(record.id)

    def initial(self, record) -> Rubric:
        k = self.key(record)
        if k not in self._initial:
            rub = None
            if self.source == "record":
                rub = record.load_rubric()
            elif self.source == "task" and record.task:
                rub = load_rubric(record.task)
            rub = rub or self.default
            if rub is None:
                raise ValueError(f"record {record.id!r} has no rubric and the run has no default rubric "
                                 f"(config.rubric)")
            self._initial[k] = rub
        return self._initial[k]

    def get(self, record) -> Rubric:
        """The record's current rubric (its latest accepted revision, else its initial one)."""
        k = self.key(record)
        return self._current.get(k) or self.initial(record)

    def current(self, key: str) -> Rubric:
        """The current rubric under a store key the store has seen (a query id, or "task:<name>")."""
        if key not in self._current and key not in self._initial:
            raise KeyError(f"rubric store: no rubric known for {key!r}")
        return self._current.get(key) or self._initial[key]

    def keys(self) -> list[str]:
        return sorted(set(self._initial) | set(self._current))

    def revised(self) -> dict[str, Rubric]:
        return dict(self._current)

    def history(self, key: str) -> list[dict]:
        return list(self._history.get(key, []))

    # ---- updates ---------------------------------------------------------------------------------
    def apply_event(self, event: Mapping[str, Any], record=None) -> bool:
        """Applies one accepted replacement event (made by `rubric_jax.rare.sample_level`, possibly on another
        process): swaps the criteria in place (same ids and maxima; the version goes up) and appends the event
        to the query's history. `record` supplies the initial rubric of a query the store has not seen yet.
        An event whose "old" criteria are no longer current (the same query twice in one step) is skipped:
        returns False."""
        k = event["key"]
        if k not in self._current and k not in self._initial:
            if record is None:
                raise KeyError(f"rubric store: no rubric known for {k!r}")
            self.initial(record)
        old = self._current.get(k) or self._initial[k]
        if any(old[cid].to_dict() != d["old"] for cid, d in event["replaced"].items()):
            return False
        repl = {cid: Criterion.from_dict(d["new"], f"event[{k!r}].{cid}") for cid, d in event["replaced"].items()}
        new = old.replace_criteria(repl)
        self._current[k] = new
        self._history.setdefault(k, []).append({key: v for key, v in event.items() if key != "key"}
                                               | {"version": new.version})
        return True

    # ---- persistence -----------------------------------------------------------------------------
    def snapshot(self) -> tuple[dict, dict]:
        """The store as it is now, cheaply (rubrics are immutable and histories only grow): `state(snapshot)`
        later gives the checkpoint state of this moment."""
        return dict(self._current), {k: len(v) for k, v in self._history.items()}

    def state(self, snapshot: tuple[dict, dict] | None = None) -> dict:
        """JSON-able state for the checkpoint (revised queries only; initial rubrics come from the data), now
        or at a `snapshot()`."""
        current, lengths = snapshot if snapshot is not None else (self._current, None)
        return {"version": STATE_VERSION, "source": self.source,
                "revised": {k: {"rubric": r.to_dict(),
                                "history": self._history.get(k, [])[:None if lengths is None else lengths.get(k, 0)]}
                            for k, r in current.items()}}

    def set_state(self, state: Mapping[str, Any]) -> None:
        if int(state.get("version", 0)) != STATE_VERSION:
            raise ValueError(f"rubric store state version {state.get('version')!r}; expected {STATE_VERSION}")
        if state.get("source") != self.source:
            raise ValueError(f"checkpoint's rubric store was built with rubric_source={state.get('source')!r}, "
                             f"this run uses {self.source!r}")
        self._current = {k: Rubric.from_dict(v["rubric"]) for k, v in state["revised"].items()}
        self._history = {k: list(v["history"]) for k, v in state["revised"].items()}

    def export_jsonl(self, path: str | os.PathLike) -> None:
        """One line per revised query: its current rubric and the history of every criterion it replaced."""
        tmp = os.fspath(path) + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            for k in sorted(self._current):
                f.write(json.dumps({"query": k, "rubric": self._current[k].to_dict(),
                                    "history": self._history.get(k, [])}, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
