"""One pass/fail flag per constraint and rollout, from programs, the LLM verifier, or both (RLMR's verifier).

`ConstraintVerifier.verify` takes each prompt's parsed constraints (`constraints.parse_constraints`) and its
group of responses, decides every (response, constraint) with the method `constraints.resolve_method` picks,
and returns a `GroupVerdict` per prompt. A rollout violates when it breaks at least one constraint; a
constraint verified by "both" is broken when either verifier says so. The LLM verdicts come from the frozen
self-judge (`Judge.verify_batch`, any `rubric_jax.judge.Verdicts` in fact; locally both label orders, prefix-shared over a response's
constraints), all prompts of a call in one batch.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from rubric_jax.verifiers.constraints import Constraint, check_program, resolve_method

__all__ = ["ConstraintVerifier", "GroupVerdict"]


@dataclasses.dataclass
class GroupVerdict:
    """One prompt's group: G responses x K constraints."""

    constraints: tuple[Constraint, ...]
    methods: tuple[str, ...]  # per constraint: program | llm | both
    passes: np.ndarray  # (G, K) bool, the final verdict
    program: np.ndarray  # (G, K) float: 1 keeps, 0 breaks, nan where no program ran
    llm: np.ndarray  # (G, K) float: P(keeps it) from the LLM verifier, nan where it did not run

    @property
    def violate(self) -> np.ndarray:
        """(G,) True when a response breaks at least one constraint (False for a prompt without constraints)."""
        return ~self.passes.all(axis=1) if self.passes.shape[1] else np.zeros(self.passes.shape[0], bool)


class ConstraintVerifier:
    """Programs for what a program can decide, the judge for the rest (see `constraints.resolve_method`).

    judge: any `rubric_jax.judge.Verdicts` (the local Judge or a RemoteJudge), needed only when some constraint
    is verified by the LLM.
    default: the run's `reward.verifier` ("auto" | "program" | "llm" | "both").
    """

    def __init__(self, judge=None, default: str = "auto", mode: str | None = None):
        self.judge, self.default, self.mode = judge, default, mode
        self.llm_calls = 0

    def methods(self, constraints: Sequence[Constraint]) -> tuple[str, ...]:
        return tuple(resolve_method(c, self.default) for c in constraints)

    def needs_llm(self, constraints: Sequence[Constraint]) -> bool:
        return any(m in ("llm", "both") for m in self.methods(constraints))

    def verify(self, prompts: Sequence[str], responses: Sequence[Sequence[str]],
               constraints: Sequence[Sequence[Constraint]]) -> list[GroupVerdict]:
        if not len(prompts) == len(responses) == len(constraints):
            raise ValueError(f"{len(prompts)} prompts, {len(responses)} response groups, {len(constraints)} "
                             f"constraint lists")
        groups, llm_texts, llm_slots = [], [], []
        for resps, cs in zip(responses, constraints):
            methods = self.methods(cs)
            g, k = len(resps), len(cs)
            prog = np.full((g, k), np.nan, np.float32)
            for ki, (c, m) in enumerate(zip(cs, methods)):
                if m in ("program", "both"):
                    prog[:, ki] = [float(check_program(c, r)) for r in resps]
            slots = [ki for ki, m in enumerate(methods) if m in ("llm", "both")]
            llm_slots.append(slots)
            llm_texts.append([cs[ki].text for ki in slots])
            groups.append((tuple(cs), methods, prog))
        llm = [np.full((len(r), len(c)), np.nan, np.float32) for r, c in zip(responses, constraints)]
        if any(llm_texts):
            if self.judge is None:
                raise ValueError("constraints verified by the LLM, but the verifier has no judge")
            todo = [q for q, t in enumerate(llm_texts) if t]
            self.llm_calls += 1
            res = self.judge.verify_batch([prompts[q] for q in todo], [responses[q] for q in todo],
                                          [llm_texts[q] for q in todo], mode=self.mode)
            for q, r in zip(todo, res):
                llm[q][:, llm_slots[q]] = r.p_pass
        out = []
        for (cs, methods, prog), p in zip(groups, llm):
            passes = np.ones(prog.shape, bool)
            passes &= np.where(np.isnan(prog), True, prog >= 0.5)
            passes &= np.where(np.isnan(p), True, p >= 0.5)
            out.append(GroupVerdict(cs, methods, passes, prog, p))
        return out
