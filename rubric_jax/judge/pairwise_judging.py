"""Pairwise judging: every ordered pair of a group's responses on each criterion, the pairs chosen by the
pairing (all, circular, swiss), read as P(first response better) and turned into win rates (docs/method.md
section 2; "Rubric Curriculum RL" section 3).

`pairwise_batch(judge, ...)` is `Judge.pairwise_batch`. It lists the pairs' sequences (head: instructions, prompt,
first response; body: second response, question; suffix: the criterion and the answer cue), scores them through
the engine's one door (`Judge._score`) and reads them in `pair_readout`. Swiss pairing plays rounds, each round's
pairs drawn from the standings so far. With judge.config.questions "worse" or "both" the same pairs are also asked
which response is worse (`Judge._worse_judge`) and the readings are pooled (`pair_readout.pooled_result`).
A call or JudgeConfig with comparison="listwise" (the run's judge.comparison) is passed on to
`rubric_jax.judge.listwise`, whose results carry the same win rates.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from rubric_jax.judge.cache import JudgmentCache, criterion_digest
from rubric_jax.judge.common import COMPARISONS, PairwiseResult, check_questions, pairing_problem
from rubric_jax.judge.listwise import listwise_batch
from rubric_jax.judge.packing import checked_group_ids, group_rng
from rubric_jax.judge.pair_readout import gen_pair_vals, pair_result, pooled_result, swiss_standing
from rubric_jax.judge.pairings import bye_of, num_swiss_rounds, pairs_for, swiss_round
from rubric_jax.judge.prompts import SuffixTable

__all__ = ["pairwise_batch"]


def pairwise_batch(judge, prompts: Sequence[str], responses: Sequence[Sequence[str]], criteria, *,
                   mode: str | None = None, pairing: str | None = None, seed: int = 0, sharing: str | None = None,
                   group_ids: Sequence[int] | None = None, comparison: str | None = None) -> list[PairwiseResult]:
    """`Judge.pairwise_batch`: one result per prompt's group (its docstring gives the arguments)."""
    kw = dict(mode=mode, pairing=pairing, seed=seed, sharing=sharing, group_ids=group_ids, comparison=comparison)
    if judge.config.questions != "better":
        return pooled_readings(judge, prompts, responses, criteria, **kw)
    return single_reading(judge, prompts, responses, criteria, **kw)


def pooled_readings(judge, prompts, responses, criteria, *, mode, pairing, seed, sharing, group_ids, comparison):
    """config.questions "worse" or "both": each reading judges the same pairs in both orders (logit
    verdicts), and `combine_readings` pools them before the mode's readout."""
    mode = judge.resolve_mode(mode)
    pairing = pairing or judge.config.pairing
    comparison = comparison or judge.config.comparison
    # a call may override the config's mode, pairing or comparison
    check_questions(judge.config.questions, mode, pairing, comparison)
    kw = dict(mode="logit", pairing=pairing, seed=seed, sharing=sharing, group_ids=group_ids, comparison=comparison)
    both = judge.config.questions == "both"
    readings = []
    if both:
        readings.append((single_reading(judge, prompts, responses, criteria, **kw), False, 1.0))
    worse = single_reading(judge._worse_judge(), prompts, responses, criteria, **kw)
    readings.append((worse, True, judge.config.worse_weight if both else 1.0))
    return [pooled_result([(r[q], invert, w) for r, invert, w in readings], mode) for q in range(len(prompts))]


def single_reading(judge, prompts, responses, criteria, *, mode, pairing, seed, sharing, group_ids, comparison):
    """One reading: the judge's own question over the pairs of the pairing."""
    t0 = time.perf_counter()
    mode = judge.resolve_mode(mode)
    pairing = pairing or judge.config.pairing
    sharing = sharing or judge.config.sharing
    comparison = comparison or judge.config.comparison
    if comparison not in COMPARISONS:
        raise ValueError(f"comparison: unknown {comparison!r}; expected one of {COMPARISONS}")
    if comparison == "listwise":
        # listwise results carry the same win_rates (mean 1/2 per criterion) and a metrics dict, so
        # every caller of pairwise_batch (the reward phase, score_groups, the TRL adapter) takes them
        return listwise_batch(judge, prompts, responses, criteria, seed=seed, mode=mode, sharing=sharing,
                              group_ids=group_ids)
    if pairing_problem(pairing):
        raise ValueError(pairing_problem(pairing))
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} response groups")
    group_ids = checked_group_ids(group_ids, len(prompts))
    per_prompt = judge.criteria_per_prompt(criteria, len(prompts))
    gen = mode == "generate"
    label_ids = judge.prompts.label_ids
    suffix_of = SuffixTable(judge.prompts, "pair", gen, labels=judge.config.prompt.labels)
    mode_class = "gen:" + repr((judge.config.gen_max_new_tokens, judge.config.gen_temperature,
                                judge.config.gen_top_k)) if gen else "logit"
    groups = []
    for q, (prompt, resps, crits) in enumerate(zip(prompts, responses, per_prompt)):
        p_ids, r_ids, d_p, d_r = judge.encode_group(prompt, resps)
        g, c = len(resps), len(crits)
        heads = [judge.prompts.head("pair", p_ids, r_ids[a], gen) for a in range(g)]
        bodies = [judge.prompts.body(r_ids[b], gen) for b in range(g)]
        sidx = [suffix_of.add(cr) for cr in crits]
        dcs = [criterion_digest(cr) for cr in crits]
        groups.append(dict(g=g, c=c, heads=heads, bodies=bodies, sidx=sidx, d_p=d_p, d_r=d_r, dcs=dcs,
                           vals=np.full((g, g, c, 3), np.nan, np.float32), mask=np.zeros((g, g), bool),
                           rng=group_rng(seed, group_ids[q])))

    def judge_pairs(pairs_per_group):
        work, where = [], []
        for gr, pairs in zip(groups, pairs_per_group):
            for i, j in np.asarray(pairs).reshape(-1, 2):
                i, j = int(i), int(j)
                gr["mask"][i, j] = gr["mask"][j, i] = True
                for a, b in ((i, j), (j, i)):
                    for c in range(gr["c"]):
                        key = JudgmentCache.key(judge.model_id, judge.prompts.fingerprint, "pair", mode_class,
                                                gr["d_p"], gr["d_r"][a], gr["d_r"][b], gr["dcs"][c])
                        work.append((key, gr["heads"][a], gr["bodies"][b], gr["sidx"][c]))
                        where.append((gr, a, b, c, key))
        got = judge._score("pair", mode, work, suffix_of, label_ids, sharing)
        for gr, a, b, c, key in where:
            v = got[key]
            if gen:
                gr["vals"][a, b, c] = gen_pair_vals(v[0])
            else:
                gr["vals"][a, b, c] = v

    if pairing == "swiss":
        played = [np.zeros((gr["g"], gr["g"]), bool) for gr in groups]
        for _ in range(max(num_swiss_rounds(gr["g"]) for gr in groups)):
            round_pairs = []
            for gr, pl in zip(groups, played):
                if gr.get("rounds", 0) >= num_swiss_rounds(gr["g"]):
                    round_pairs.append(np.zeros((0, 2), np.int32))
                    continue
                standing = swiss_standing(gr, mode)
                prs = swiss_round(standing, pl, gr["rng"])
                bye = bye_of(prs, gr["g"])
                if bye is not None:
                    pl[bye, bye] = True
                for i, j in prs:
                    pl[i, j] = pl[j, i] = True
                gr["rounds"] = gr.get("rounds", 0) + 1
                round_pairs.append(prs)
            judge_pairs(round_pairs)
    else:
        judge_pairs([pairs_for(pairing, gr["g"], k=judge.config.circular_k) for gr in groups])

    results = [pair_result(gr, mode, judge.config.min_verdict_mass) for gr in groups]
    judge.stats.invalid += sum(int((r.mask[:, :, None] & ~r.valid).sum()) for r in results)
    judge.stats.seconds += time.perf_counter() - t0
    return results
