"""Listwise group judging through the judge engine: the whole group in one sequence per criterion.

Source: OpenPipe ART's RULER ranks all rollouts of a group in one judge call. Here the frozen self-judge
reads the G responses of a prompt together and names the best one for a criterion; the verdict is its
next-token distribution over the label tokens " A", " B", ... (one per shown response), read as a
Plackett-Luce first choice (`rubric_jax.rewards.listwise`). Sequences go through `Judge._score`, the same
compiled prefix-tree forward as the pairwise and pointwise verdicts and the constraint verifier:

    sequence(r, c) = head(r) + suffix(c)
    head(r)    [system, "Task", prompt, "Response A", response order_r[0], "Response B", response order_r[1],
                ..., the question, "Criterion" heading]
    suffix(c)  [criterion c, a reminder naming the labels, end of user turn, assistant start, answer cue]

Every criterion of presentation r is a lane under the one head(r), so the G responses are read once per
presentation however many criteria are judged. The K presentations (default: G cyclic shifts of a seeded
permutation, a Latin square) put each response in each position equally often, which cancels an additive
position preference of the judge exactly (`rewards.listwise.response_logits`). Cost per group: K sequences
of about G responses' tokens each, against G(G-1) sequences of two responses' tokens for all-pairs pairwise
judging.

Scores are listwise win rates w_i = 1/(G-1) sum_{j != i} P(i above j), which average exactly 1/2 in a group
like pairwise win rates. A presentation whose label tokens hold less than `min_verdict_mass` of the
probability is unreadable and left out (then the bias no longer cancels exactly); none readable -> 1/2.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from typing import Sequence

import numpy as np

from rubric_jax.judge.cache import JudgmentCache, criterion_digest, digest
from rubric_jax.judge.packing import checked_group_ids
from rubric_jax.judge.prompts import Suffixes, VerdictTokenError, pairwise_criterion_text, verdict_token_ids
from rubric_jax.judge.readout import enough_mass, label_probs
from rubric_jax.rewards import listwise as lw

__all__ = ["LIST_LABELS", "ListwisePrompts", "ListwiseResult", "listwise_batch"]

LIST_LABELS = tuple(f" {chr(ord('A') + k)}" for k in range(26))

LIST_SYSTEM = ("You compare several responses to one task on one criterion and name the response that "
               "satisfies it best.")
LIST_QUESTION = ("Which of the {N} responses above best satisfies the criterion below? Judge this criterion "
                 "only. Reply with the letter of one response.")
LIST_REMINDER = "\n\nOn this criterion, which response is best: {LABELS}?"
# ends mid-sentence so that a space-led letter is the natural next token, as the pairwise cue does
LIST_CUE = "The best response is Response"

# strings that neither a chat template nor user text contains, split on after rendering
_SENT = "\x00@@LIST{}@@\x00"


def _label_list(letters: Sequence[str]) -> str:
    """'A, B or C' (the reminder names every label the judge may answer with)."""
    return letters[0] if len(letters) == 1 else ", ".join(letters[:-1]) + " or " + letters[-1]


class ListwisePrompts:
    """Token segments of listwise judge prompts for one judge (its tokenizer and PromptBuilder).

    For G responses, the rendered chat text is split at the variable parts:
        head(order) = seg[0] + P + seg[1] + R[order[0]] + seg[2] + ... + R[order[G-1]] + seg[G+1]
        suffix(c)   = tokens(criterion text + reminder + tail)
    Each literal piece is tokenized on its own and sequences are concatenated token lists, as in
    `PromptBuilder`.
    """

    def __init__(self, judge):
        self.pb = judge.prompts
        self.tok = judge.tokenizer
        self._segments: dict[int, tuple] = {}
        self._ids: dict[int, list[int]] = {}

    def label_ids(self, g: int) -> list[int]:
        """Ids of the G labels " A".." "; each must be one token of the judge's tokenizer."""
        if g not in self._ids:
            if g > len(LIST_LABELS):
                raise ValueError(f"listwise judging labels responses A..Z: at most {len(LIST_LABELS)} "
                                 f"responses per group, got {g}")
            try:
                self._ids[g] = verdict_token_ids(self.tok, LIST_LABELS[:g], f"listwise labels for G={g}")
            except VerdictTokenError as e:
                raise VerdictTokenError(f"{e}. Listwise judging needs every one of the first {g} labels "
                                        f"{list(LIST_LABELS[:g])} to be a single token; use a smaller group") from None
        return self._ids[g]

    def segments(self, g: int) -> tuple:
        """(token pieces seg[0..G+1], tail text after the criterion) for groups of G."""
        if g not in self._segments:
            letters = [lab.strip() for lab in LIST_LABELS[:g]]
            blocks = "\n\n".join(f"### Response {letters[k]}\n{_SENT.format(k)}" for k in range(g))
            user = (f"### Task\n{_SENT.format('P')}\n\n{blocks}\n\n" + LIST_QUESTION.format(N=g)
                    + f"\n\n### Criterion\n{_SENT.format('C')}")
            text = self.tok.chat(user, system=LIST_SYSTEM) + LIST_CUE
            pieces, rest = [], text
            for name in ["P"] + list(range(g)) + ["C"]:
                before, sep, rest = rest.partition(_SENT.format(name))
                if not sep:
                    raise ValueError("chat template dropped a placeholder; cannot build listwise prompts")
                pieces.append(before)
            segs = tuple(tuple(self.tok.encode(p)) if p else () for p in pieces)
            self._segments[g] = (segs, rest)
        return self._segments[g]

    def head(self, prompt_ids, resp_ids_in_order: Sequence[Sequence[int]]) -> tuple[int, ...]:
        segs, _ = self.segments(len(resp_ids_in_order))
        out = segs[0] + tuple(prompt_ids)
        for k, r in enumerate(resp_ids_in_order):
            out += segs[k + 1] + tuple(r)
        return out + segs[-1]

    def suffix(self, criterion, g: int) -> tuple[int, ...]:
        _, tail = self.segments(g)
        letters = [lab.strip() for lab in LIST_LABELS[:g]]
        text = pairwise_criterion_text(criterion) + LIST_REMINDER.format(LABELS=_label_list(letters))
        return tuple(self.tok.encode(text + tail))

    @property
    def fingerprint(self) -> str:
        """The text the listwise judge reads (part of its cache keys)."""
        parts = [self.pb.fingerprint, LIST_SYSTEM, LIST_QUESTION, LIST_REMINDER, LIST_CUE, repr(LIST_LABELS)]
        return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


@dataclasses.dataclass
class ListwiseResult:
    """One prompt's group: G responses, C criteria, K presentations."""

    scores: np.ndarray  # (G, C) listwise win rates in [0, 1], mean 1/2 per criterion
    strength: np.ndarray  # (G, C) Plackett-Luce strengths (mean log first-choice probability; votes in hard mode)
    label_probs: np.ndarray  # (K, G, C) P(response i named best | presentation r), by response index
    label_logits: np.ndarray  # (K, G, C) raw label-token logits, by POSITION (nan: unreadable)
    orders: np.ndarray  # (K, G) order[r, pos] = response shown at position pos
    valid: np.ndarray  # (K, C) the presentation's verdict was readable
    metrics: dict

    @property
    def win_rates(self) -> np.ndarray:
        """The same as `scores`, under the name the pairwise result uses."""
        return self.scores


def _orders_for(orders, q: int, g: int, seed, gid: int) -> np.ndarray:
    if orders is None or isinstance(orders, (int, np.integer)):
        return lw.presentation_orders(g, None if orders is None else int(orders), (int(seed), gid))
    if isinstance(orders, (list, tuple)) and orders and not np.isscalar(orders[0]) and np.asarray(orders[0]).ndim == 2:
        return lw.check_orders(orders[q], g)  # one (K, G) array per prompt
    return lw.check_orders(orders, g)


def listwise_batch(judge, prompts: Sequence[str], responses: Sequence[Sequence[str]], criteria, *,
                   orders=None, seed: int = 0, mode: str | None = None, sharing: str | None = None,
                   group_ids: Sequence[int] | None = None) -> list[ListwiseResult]:
    """Listwise verdicts for every prompt's group on every criterion.

    judge: a `rubric_jax.judge.Judge`. criteria: a Rubric / list of Criterion for all prompts, or one per
    prompt. orders: None (G presentations, a Latin square from `presentation_orders(G, G, (seed, group id))`),
    an int K (K presentations, see `presentation_orders` for what cancels), one (K, G) array for every group,
    or a list of one (K, G) array per prompt. mode: "logit", "sign" or "hard" (default: the judge's mode,
    "logit" for a generate-mode judge, which has no listwise parser). group_ids as in `Judge.pairwise_batch`:
    a group's default orders depend on (seed, its id) only. Verdicts are cached per (presentation, criterion).
    """
    t0 = time.perf_counter()
    mode = mode or judge.config.mode
    if mode == "generate":
        mode = "logit"
    if mode not in lw.LISTWISE_MODES:
        raise ValueError(f"listwise mode must be one of {lw.LISTWISE_MODES}, got {mode!r}")
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} response groups")
    gids = checked_group_ids(group_ids, len(prompts))
    sharing = sharing or judge.config.sharing
    per_prompt = judge.criteria_per_prompt(criteria, len(prompts))
    lp = ListwisePrompts(judge)
    fp = lp.fingerprint
    table = Suffixes()  # (criterion, G) -> its suffix
    by_g: dict[int, tuple[list, list]] = {}  # one _score call per group size: the label ids differ
    groups = []
    for q, (prompt, resps, crits) in enumerate(zip(prompts, responses, per_prompt)):
        g = len(resps)
        if g < 1:
            raise ValueError(f"prompt {q}: no responses to judge")
        order = _orders_for(orders, q, g, seed, gids[q])
        groups.append(dict(g=g, c=len(crits), orders=order,
                           vals=np.full((len(order), g, len(crits)), np.nan, np.float32),
                           lse=np.full((len(order), len(crits)), np.nan, np.float32)))
        if g == 1:
            continue  # nothing to compare: w = 1/2 without a judge call
        lp.label_ids(g)  # a clear error before any work if the labels are not single tokens
        p_ids, r_ids, d_p, d_r = judge.encode_group(prompt, resps)
        dcs = [criterion_digest(cr) for cr in crits]
        sidx = [table.keyed((cr, g), lambda cr=cr: lp.suffix(cr, g)) for cr in crits]
        work, where = by_g.setdefault(g, ([], []))
        for r, row in enumerate(order):
            head = lp.head(p_ids, [r_ids[i] for i in row])
            shown = digest(*[d_r[i] for i in row])
            for c in range(len(crits)):
                key = JudgmentCache.key(judge.model_id, fp, "list", "logit", d_p, shown,
                                        ",".join(map(str, row.tolist())), dcs[c])
                work.append((key, head, (), sidx[c]))
                where.append((q, r, c, key))
    pc = judge.config.prompt
    for g, (work, where) in by_g.items():
        # Each group size is its own kind of call (its own labels and head length), with its ceiling
        # planned for the longest prompt and responses the token budgets allow and every reserved criterion.
        kind = f"list{g}"
        judge.set_limits(kind, lambda reserved, g=g: (
            len(lp.head([0] * pc.max_prompt_tokens, [[0] * pc.max_response_tokens] * g)),
            [len(lp.suffix(cr, g)) for cr in reserved]))
        # all modes read the label logits, so they share cached values
        got = judge._score(kind, "logit", work, table, lp.label_ids(g), sharing)
        for q, r, c, key in where:
            groups[q]["vals"][r, :, c] = got[key][:g]
            groups[q]["lse"][r, c] = got[key][g]
    results = [_result(gr, mode, judge.config.min_verdict_mass) for gr in groups]
    judge.stats.invalid += int(sum((~r.valid).sum() for r in results if r.orders.shape[1] > 1))
    judge.stats.seconds += time.perf_counter() - t0
    return results


def _result(gr: dict, mode: str, min_mass: float) -> ListwiseResult:
    """Readout of one group: vals (K, G positions, C) label logits, lse (K, C) log-sum-exp over the vocabulary."""
    g, c_n, orders = gr["g"], gr["c"], gr["orders"]
    k = len(orders)
    vals = gr["vals"].astype(np.float64)
    if g == 1:
        ones = np.ones((k, 1, c_n), np.float32)
        return ListwiseResult(scores=np.full((1, c_n), 0.5, np.float32), strength=np.zeros((1, c_n), np.float32),
                              label_probs=ones, label_logits=ones * np.nan, orders=orders,
                              valid=np.ones((k, c_n), bool), metrics={"judgments": 0.0, "invalid_fraction": 0.0,
                                                                      "position_bias": 0.0, "top_agreement": 1.0})
    valid = np.all(np.isfinite(vals), axis=1)
    if min_mass > 0:  # over the positions' letters
        valid &= enough_mass(label_probs(vals, gr["lse"], axis=1)[1], min_mass)
    v = valid.astype(np.float32)
    lg = np.where(valid[:, None, :], vals, 0.0).astype(np.float32)
    scores, strength = lw.listwise_scores(lg, orders, v, mode)
    scores, strength = np.asarray(scores, np.float32), np.asarray(strength, np.float32)
    pos_p = np.exp(np.asarray(lw.position_log_probs(lg), np.float64))  # (K, pos, C)
    label_probs = np.asarray(lw.to_responses(pos_p, orders), np.float32)
    label_probs = np.where(valid[:, None, :], label_probs, np.nan).astype(np.float32)
    bias = np.asarray(lw.listwise_position_bias(lg, v), np.float64)
    # how often one presentation's pick is the group's consensus best (1: the position never changed the pick)
    picks = np.asarray(orders)[np.arange(k)[:, None], np.argmax(pos_p, axis=1)]  # (K, C) response picked
    best = np.argmax(strength, axis=0)  # (C,)
    n = max(int(valid.sum()), 1)
    metrics = {
        "judgments": float(k * c_n),
        "invalid_fraction": float((~valid).mean()) if valid.size else 0.0,
        "position_bias": float(bias[0]),  # first position's mean first-choice probability minus 1/G
        "position_spread": float(bias.max() - bias.min()),
        "top_agreement": float(((picks == best[None, :]) & valid).sum() / n),
        "latin": float(lw.is_latin(orders)),
    }
    return ListwiseResult(scores=scores, strength=strength, label_probs=label_probs,
                          label_logits=np.where(valid[:, None, :], vals, np.nan).astype(np.float32),
                          orders=orders, valid=valid, metrics=metrics)
