"""The judge's live fidelity: how often its verdicts agree with a program's on the same rollouts, for the log only.

Where a judge decides something a program can also check (an IFEval instruction, a bundled word count), the
program's verdict is a ground truth the run can afford: it is computed on the step's rollouts beside the reward,
never inside it, and the share of agreement is logged every step (config.judge.program_agreement):

  pointwise (RLMR's LLM verifier)   judge/program_agreement = share of (rollout, constraint) verdicts where the
                                    judge's met / not met equals the program's keeps / breaks
  pairwise (per-prompt rubrics)     judge/program_agreement = share of program-decided pairs (one rollout keeps
                                    the criterion's instruction, the other breaks it) that the judge orders the
                                    same way (`rewards.judge_health.pairwise_program_agreement`)

and judge/program_agreement/<kind> per constraint kind (IFEval instruction id or bundled kind). Rows are
counts per kind in the fixed order KINDS, so groups and processes pool by summing before any share is taken.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from rubric_jax.rewards import judge_health as H
from rubric_jax.verifiers.constraints import PROGRAMMATIC, check_program, parse_constraints

KINDS = tuple(sorted(PROGRAMMATIC))  # fixed order: rows pool across processes column by column


def _stack(groups) -> dict[str, np.ndarray]:
    """{"agree", "decided"}: (B, len(KINDS)) from each group's (kinds, agree_k, decided_k) counts."""
    agree, decided = [], []
    for kinds, a_k, n_k in groups:
        a, n = np.zeros(len(KINDS), np.int64), np.zeros(len(KINDS), np.int64)
        for kind, x, y in zip(kinds, np.asarray(a_k), np.asarray(n_k)):
            a[KINDS.index(kind)] += int(x)
            n[KINDS.index(kind)] += int(y)
        agree.append(a)
        decided.append(n)
    return {"agree": np.stack(agree), "decided": np.stack(decided)}


def _programs(constraints, responses: Sequence[str]) -> np.ndarray:
    """(G, K) the programs' keeps / breaks of every response against every constraint."""
    return np.array([[check_program(c, r) for c in constraints] for r in responses], bool).reshape(
        len(responses), len(constraints))


def pointwise_rows(verdicts, responses: Sequence[Sequence[str]]) -> dict[str, np.ndarray]:
    """{"agree", "decided"}: (B, len(KINDS)) counts from RLMR's GroupVerdicts (`verifiers.verifier`): every
    (rollout, constraint) the LLM verifier decided and a program can check. The program's verdicts are
    computed here, for the log alone."""
    def group(v, resps):
        slots = [k for k, c in enumerate(v.constraints) if c.programmatic and not np.isnan(v.llm[:, k]).all()]
        llm = v.llm[:, slots]
        # the verifier's own pass rule (ConstraintVerifier.verify)
        a, n = H.pointwise_program_agreement(llm >= 0.5, _programs([v.constraints[k] for k in slots], resps),
                                             ~np.isnan(llm))
        return [v.constraints[k].kind for k in slots], a, n

    return _stack(group(v, resps) for v, resps in zip(verdicts, responses))


def programmatic(record) -> dict[str, Any]:
    """The record's constraints that a program checks, by kind (parsed once, when the run starts: a bad one
    fails there, naming the record)."""
    return {c.kind: c for c in parse_constraints(record.constraints or [], where=f"record {record.id!r}")
            if c.programmatic}


def pairwise_rows(results, programs, rubrics, responses: Sequence[Sequence[str]]) -> dict[str, np.ndarray]:
    """{"agree", "decided"}: (B, len(KINDS)) counts of program-decided pairs per kind, from pairwise results
    (`judge.common.PairwiseResult`, one per group, criteria in each rubric's order). programs[b]: group b's
    record's `programmatic` constraints; a criterion whose id is one of their kinds (as
    `data.ifeval_train.instruction_rubric` writes them) is compared, the others are not."""
    def group(res, by_kind, rubric, resps):
        slots = [k for k, c in enumerate(rubric.criteria) if c.id in by_kind]
        cons = [by_kind[rubric.criteria[k].id] for k in slots]
        a, n = H.pairwise_program_agreement(np.asarray(res.p)[:, :, slots], res.mask, _programs(cons, resps))
        return [c.kind for c in cons], a, n

    return _stack(group(*g) for g in zip(results, programs, rubrics, responses))


def metrics(rows: dict[str, Any]) -> dict[str, float]:
    """judge/program_agreement over every compared verdict (or pair) in `rows`, and per kind that had any."""
    a, n = rows["agree"].sum(axis=0), rows["decided"].sum(axis=0)
    if not n.sum():
        return {}
    out = {"judge/program_agreement": float(a.sum() / n.sum())}
    for kind, x, y in zip(KINDS, a, n):
        if y:
            out[f"judge/program_agreement/{kind}"] = float(x / y)
    return out
