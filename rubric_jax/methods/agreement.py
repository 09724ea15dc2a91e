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


def _row(kinds: Sequence[str], agree, decided) -> tuple[np.ndarray, np.ndarray]:
    a, n = np.zeros(len(KINDS), np.int64), np.zeros(len(KINDS), np.int64)
    for kind, x, y in zip(kinds, np.asarray(agree), np.asarray(decided)):
        a[KINDS.index(kind)] += int(x)
        n[KINDS.index(kind)] += int(y)
    return a, n


def pointwise_rows(verdicts, responses: Sequence[Sequence[str]]) -> dict[str, np.ndarray]:
    """{"agree", "decided"}: (B, len(KINDS)) counts from RLMR's GroupVerdicts (`verifiers.verifier`): every
    (rollout, constraint) the LLM verifier decided and a program can check. The program's verdicts are
    computed here, for the log alone."""
    agree, decided = [], []
    for v, resps in zip(verdicts, responses):
        slots = [k for k, c in enumerate(v.constraints) if c.programmatic and not np.isnan(v.llm[:, k]).all()]
        kinds = [v.constraints[k].kind for k in slots]
        if slots:
            judge = v.llm[:, slots] >= 0.5  # the verifier's own pass rule (ConstraintVerifier.verify)
            program = np.array([[check_program(v.constraints[k], r) for k in slots] for r in resps], bool)
            a, n = H.pointwise_program_agreement(judge, program, ~np.isnan(v.llm[:, slots]))
        else:
            a, n = (), ()
        ra, rn = _row(kinds, a, n)
        agree.append(ra)
        decided.append(rn)
    return {"agree": np.stack(agree), "decided": np.stack(decided)}


def record_programs(record, criteria) -> list:
    """For each criterion of a prompt's rubric, the record's constraint of the same kind when a program checks it
    (the criterion's id is the constraint's type, as `data.ifeval_train.instruction_rubric` writes them), else
    None."""
    by_kind = {c.kind: c for c in parse_constraints(record.constraints or [], where=f"record {record.id!r}")
               if c.programmatic}
    return [by_kind.get(c.id) for c in criteria]


def pairwise_rows(results, records, rubrics, responses: Sequence[Sequence[str]]) -> dict[str, np.ndarray]:
    """{"agree", "decided"}: (B, len(KINDS)) counts of program-decided pairs per kind, from pairwise results
    (`judge.common.PairwiseResult`, one per group, criteria in each rubric's order)."""
    agree, decided = [], []
    for res, rec, rubric, resps in zip(results, records, rubrics, responses):
        programs = record_programs(rec, rubric.criteria)
        slots = [k for k, c in enumerate(programs) if c is not None]
        if slots:
            program = np.array([[check_program(programs[k], r) for k in slots] for r in resps], bool)
            a, n = H.pairwise_program_agreement(np.asarray(res.p)[:, :, slots], res.mask, program)
        else:
            a, n = (), ()
        ra, rn = _row([programs[k].kind for k in slots], a, n)
        agree.append(ra)
        decided.append(rn)
    return {"agree": np.stack(agree), "decided": np.stack(decided)}


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
