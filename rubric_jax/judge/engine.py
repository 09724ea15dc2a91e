"""The judge engine: rollouts and criteria in, verdict matrices out (docs/method.md: RcRL and RARE).

    judge = Judge(model, tokenizer)
    res = judge.pairwise(prompt, responses, rubric)            # PairwiseResult: p[G, G, C], win rates, ...
    res = judge.pointwise(prompt, responses, rubric)           # PointwiseResult: s[G, C], valid[G, C]

Work flow of one call (several prompts can be judged together with *_batch):
  1. tokenize the prompt, each response (cut to the token budget) and each criterion once;
  2. list the judgments: ordered pairs (a, b) of the pairing x criteria (pairwise) or responses x
     criteria (pointwise); look each up in the judgment cache;
  3. plan the missing ones as a prefix tree: heads [instructions, prompt, response a] (one per first
     response), under each head one unit per second response: its body [response b, question] and
     the criteria's suffixes [criterion, answer cue] packed into lanes; reads at each answer cue;
  4. pad to bucketed shapes (lengths on a geometric ladder with 4 steps per octave, counts likewise)
     and run `forward.tree_score_jit` in calls of about `tokens_per_call` tokens;
  5. verdict = softmax over the verdict tokens only; both orders averaged (`rewards.symmetrize`)
     or made discrete (`rewards.sign_verdicts`, `rewards.hard_verdicts`); health metrics from `rewards.judge_health`.
Modes: "logit" (soft), "sign" (the sign of the order-averaged preference), "hard" (argmax per order),
"generate" (rationale then an answer line, parsed; unreadable answers are invalid). Pointwise scores have no
orders to average, so "sign" reads them as "logit" does (the expected score). sharing="none" scores every
judgment as one full sequence (benchmark baseline).

`Judge` is the local backend of the `Verdicts` protocol (verdicts.py): pairwise_batch, pointwise_batch and
verify_batch. This module holds the shapes, the device calls, the cache and the engine's internal door,
`Judge._score`, through which every kind's sequences are scored; each kind builds its sequences in its own
module: `pairwise_judging` (read out in `pair_readout`), `pointwise_judging` (a response alone on a
criterion's scale), `listwise` (a whole group per presentation order) and `verify` (RLMR's constraint checks).

Randomness never depends on which other prompts share a call, so a batch split over processes judges
each group as it would have been judged in one call: Swiss pairings of group q draw from
np.random.default_rng((seed, group_ids[q])), group_ids being each prompt's global index (default: its
position), and generate mode samples each judged sequence with a key derived from a hash of its tokens
(the work item's identity; no per-call seed, like the judgment cache, which serves a verdict whatever
call computed it). The verdicts themselves are model outputs and can differ in the last bits with the
padded shapes a batch packs into.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rubric_jax import progress
from rubric_jax.judge import forward
from rubric_jax.judge.cache import JudgmentCache, digest
from rubric_jax.judge.common import (COMPARISONS, MODES, SHARING, JudgeConfig, JudgeStats,  # noqa: F401
                                     PairwiseResult, PointwiseResult, as_criteria, bucket, criteria_per_prompt,
                                     check_questions, model_fingerprint, pow2, pow2_floor)
from rubric_jax.judge.packing import first_fit, sequence_keys
from rubric_jax.judge.prompts import WORSE_PROMPT, PromptBuilder, PromptConfig
from rubric_jax.rubrics.types import Criterion

if TYPE_CHECKING:
    from rubric_jax.judge.verify import VerifyResult

log = logging.getLogger(__name__)


@dataclasses.dataclass
class _Job:
    """One head/body pair and the criteria still to score on it."""

    head: tuple[int, ...]
    body: tuple[int, ...]
    crits: list[int]  # criterion indices (into the call's suffix table)
    out: list[Any]  # per criterion: output slot key


# ---------------------------------------------------------------------------------------------
# The judge


class Judge:
    """A frozen judge model plus its prompts, compiled scoring functions, cache and statistics.

    The model's weights are read at every call, so a Judge never scores with stale weights.
    """

    def __init__(self, model, tokenizer, config: JudgeConfig | None = None, *, model_id: str | None = None,
                 cache: JudgmentCache | None = None, **overrides):
        config = config or JudgeConfig()
        prompt_fields = {f.name for f in dataclasses.fields(PromptConfig)}
        prompt_over = {k: overrides.pop(k) for k in list(overrides) if k in prompt_fields}
        if prompt_over:
            overrides["prompt"] = dataclasses.replace(config.prompt, **prompt_over)
        if overrides:
            config = dataclasses.replace(config, **overrides)
        self.config = config
        self.model = model
        self.tokenizer = tokenizer
        self.prompts = PromptBuilder(tokenizer, config.prompt)
        self.model_id = model_id or model_fingerprint(model)
        self.cache = cache if cache is not None else JudgmentCache(config.cache_entries)
        self.stats = JudgeStats()
        self._shapes: dict[tuple, list] = {}  # compiled call shapes per (kind, verdict ids)
        self._reserved: list[Criterion] = []  # criteria later calls may bring (see reserve)
        self._limits: dict[str, Any] = {}  # kind -> limits function (see set_limits)
        self._worse: Judge | None = None  # the "worse" reading's judge (config.questions; made when first needed)

    @property
    def tokens_per_call(self) -> int:
        if self.config.tokens_per_call:
            return self.config.tokens_per_call
        return 16384 if jax.default_backend() == "cpu" else 131072

    # ---- shapes: a bounded number of compiled programs ----------------------------------------
    def _pick_shape(self, kind, fresh, need, lanes_at, cost):
        """The call shape (hn, t1, jn, tb, lc, lane, r) for this batch of work, compiling at most
        `config.max_shapes` shapes per kind over the judge's life.

        A compiled shape that fits is reused when it costs at most `reuse_slack` times the fresh
        bucketed shape (or always, once the budget is spent). The last slot of the budget goes to a
        ceiling shape, the elementwise maximum of everything seen grown by half on the length axes, so
        that later calls keep fitting a compiled program.
        """
        cfg = self.config
        shapes = self._shapes.setdefault(kind, [])

        def fits(sh):
            hn, t1, jn, tb, lc, lane, r = sh
            return (t1 >= need["t1"] and jn >= need["jn"] and tb >= need["tb"] and r >= need["r"]
                    and lane >= need["longest"] and lc >= lanes_at(lane))

        fitting = sorted((sh for sh in shapes if fits(sh)), key=cost)
        budget_left = cfg.max_shapes - len(shapes)
        if fitting and (budget_left <= 0 or cost(fitting[0]) <= cfg.reuse_slack * cost(fresh)):
            return fitting[0]
        if budget_left > 1 or not shapes:
            shapes.append(fresh)
            return fresh
        if budget_left == 1:
            shapes.append(self._ceiling(shapes + [fresh], need["kind"], lanes_at))
            return shapes[-1]
        # Budget spent and nothing fits: correctness first (one more compilation), and say so.
        log.warning("judge: no compiled %s shape fits %s (budget of %d spent): compiling another",
                    kind[1], need, cfg.max_shapes)
        shapes.append(fresh)
        return fresh

    def reserve(self, criteria) -> None:
        """Declares every criterion later calls may judge (e.g. a curriculum's full list), so the last
        compiled shape is planned to hold all of them at once."""
        self._reserved = as_criteria(criteria)
        if self._worse is not None:
            self._worse.reserve(self._reserved)

    def set_limits(self, kind: str, limits) -> None:
        """For a kind of sequence this engine does not build itself (listwise group prompts): limits(reserved
        criteria) -> (the longest head the token budgets allow, each reserved criterion's suffix length),
        called only when that kind's ceiling shape is planned, so it always sees the current reservation."""
        self._limits[kind] = limits

    def _ceiling(self, stack, kind, lanes_at):
        """The budget's last shape: every dimension at least the largest seen; lengths grown towards
        the token budgets' maxima; reads and lanes room for all reserved criteria."""
        cfg = self.config
        pc = cfg.prompt
        if kind in self._limits:
            head_max, reserved = self._limits[kind](self._reserved)
        else:
            head_max = len(self.prompts.head(kind, [0] * pc.max_prompt_tokens, [0] * pc.max_response_tokens))
            reserved = [len(self.prompts.suffix(kind, c)) for c in self._reserved] if kind != "verify" else []
        body_max = len(self.prompts.body([0] * pc.max_response_tokens)) if kind == "pair" else 0
        grow = lambda x, top: max(x, min(bucket(2 * x, cfg.len_steps), bucket(max(top, 1), cfg.len_steps)))
        lane = max(max(sh[5] for sh in stack), bucket(max(reserved, default=1), cfg.len_steps))
        lc = max(max(sh[4] for sh in stack), lanes_at(lane),
                 len(first_fit([(n, None) for n in reserved], lane)))
        return (max(sh[0] for sh in stack), grow(max(sh[1] for sh in stack), head_max), max(sh[2] for sh in stack),
                grow(max(sh[3] for sh in stack), body_max), lc, lane,
                max(max(sh[6] for sh in stack), pow2(len(reserved))))

    # ---- device calls ------------------------------------------------------------------------
    def _run_tree(self, jobs: list[_Job], suffixes: list[tuple[int, ...]], ids: list[int], kind: str = "pair"):
        """Scores every (job, criterion) with the prefix-tree forward. Returns {out key: (logits, lse)}.

        Each job is one unit: its body plus its criteria's suffixes packed into lanes of L tokens
        (first fit, longest first). Units are grouped under their head.
        """
        cfg = self.config
        if not jobs:
            return {}
        longest = max(len(suffixes[ci]) for job in jobs for ci in job.crits)

        def pack(job, lane):
            """First fit, longest first: lists of (criterion, out key) whose suffixes fit in `lane` tokens."""
            return first_fit([(len(suffixes[ci]), (ci, key)) for ci, key in zip(job.crits, job.out)], lane)

        heads: dict[tuple[int, ...], list] = {}
        for job in jobs:
            heads.setdefault(job.head, []).append(job)
        need = dict(t1=max(len(h) for h in heads), jn=max(len(js) for js in heads.values()),
                    tb=max(len(j.body) for j in jobs), r=max(len(j.crits) for j in jobs), longest=longest,
                    kind=kind)
        sets = list({tuple(sorted(j.crits)): j for j in jobs}.values())  # distinct criteria sets: few

        def lanes_at(lane):
            return max(len(pack(j, lane)) for j in sets)

        def cost(shape):
            """Padded tokens of the whole call under a shape, weighted by attention over its context."""
            hn, t1, jn, tb, lc, lane, _ = shape
            per_head = t1 + jn * (tb + lc * lane)
            return -(-len(heads) // hn) * hn * per_head * (1000 + t1 + tb + lane)

        # Fresh shape: lane length minimising padded lane tokens weighted by their cost (a fixed per-token
        # cost plus attention over head + body + lane keys), every length on the bucket ladder.
        context = max(len(h) + len(j.body) for h, js in heads.items() for j in js)
        best = None
        for lane in sorted({bucket(x, cfg.len_steps) for x in range(longest, max(longest, cfg.lane_tokens) * 4 + 1, 8)}
                           | {bucket(longest, cfg.len_steps)}):
            if lane < longest:
                continue
            c = lanes_at(lane) * lane * (1000 + context + lane)
            if best is None or c < best[0]:
                best = (c, lane)
        lane = best[1]
        t1 = bucket(need["t1"], cfg.len_steps)
        tb = max(8, bucket(need["tb"], cfg.len_steps) if need["tb"] else 8)
        lc, r, jn = lanes_at(lane), pow2(need["r"]), need["jn"]
        per_head = t1 + jn * (tb + lc * lane)
        hn = max(1, min(bucket(len(heads), 4, 1, 1), pow2_floor(self.tokens_per_call // per_head)))
        # verify, pair and point calls have different proportions: each kind gets its own shape budget
        shape = self._pick_shape(("tree", kind, len(ids)), (hn, t1, jn, tb, lc, lane, r), need, lanes_at, cost)
        hn, t1, jn, tb, lc, lane, r = shape
        per_head = t1 + jn * (tb + lc * lane)
        head_list = [(h, [(j.body, pack(j, lane)) for j in js]) for h, js in heads.items()]
        ids_arr = jnp.asarray(ids, jnp.int32)
        pad = self.tokenizer.pad_id
        results = {}
        total = sum(len(j.out) for j in jobs)
        progress.report("judge", 0, total, "verdicts")
        for start in range(0, len(head_list), hn):
            chunk = head_list[start:start + hn]
            htok = np.full((hn, t1), pad, np.int32)
            hmask = np.zeros((hn, t1), bool)
            btok = np.full((hn, jn, tb), pad, np.int32)
            bvalid = np.zeros((hn, jn, tb), bool)
            ltok = np.full((hn, jn, lc, lane), pad, np.int32)
            lseg = np.zeros((hn, jn, lc, lane), np.int32)
            lrel = np.zeros((hn, jn, lc, lane), np.int32)
            read = np.zeros((hn, jn, r), np.int32)
            slots = []
            for hi, (head, units) in enumerate(chunk):
                htok[hi, :len(head)] = head
                hmask[hi, :len(head)] = True
                self.stats.real_tokens += len(head)
                for ui, (body, lanes) in enumerate(units):
                    btok[hi, ui, :len(body)] = body
                    bvalid[hi, ui, :len(body)] = True
                    self.stats.real_tokens += len(body)
                    k = 0
                    for li, members in enumerate(lanes):
                        pos = 0
                        for si, (ci, key) in enumerate(members):
                            sfx = suffixes[ci]
                            ns = len(sfx)
                            ltok[hi, ui, li, pos:pos + ns] = sfx
                            lseg[hi, ui, li, pos:pos + ns] = si + 1
                            lrel[hi, ui, li, pos:pos + ns] = np.arange(ns)
                            read[hi, ui, k] = li * lane + pos + ns - 1
                            slots.append((hi, ui, k, key))
                            k += 1
                            pos += ns
                            self.stats.real_tokens += ns
            self.stats.shapes.add(("tree", len(ids)) + shape)
            self.stats.model_calls += 1
            self.stats.padded_tokens += hn * per_head
            graphdef, state = nnx.split(self.model)
            vl, lse = forward.tree_score_jit(graphdef, state, jnp.asarray(htok), jnp.asarray(hmask), jnp.asarray(btok),
                                             jnp.asarray(bvalid), jnp.asarray(ltok), jnp.asarray(lseg),
                                             jnp.asarray(lrel), jnp.asarray(read), ids_arr)
            vl, lse = np.asarray(vl), np.asarray(lse)
            for hi, ui, k, key in slots:
                results[key] = (vl[hi, ui, k], lse[hi, ui, k])
            progress.report("judge", len(results), total, "verdicts")
        return results

    def _run_full(self, jobs: list[_Job], suffixes: list[tuple[int, ...]], ids: list[int]):
        """Baseline/reference: every (job, criterion) as its own full sequence."""
        seqs = [(job.head + job.body + suffixes[ci], key) for job in jobs for ci, key in zip(job.crits, job.out)]
        if not seqs:
            return {}
        t = bucket(max(len(s) for s, _ in seqs), self.config.len_steps)
        b = max(1, min(bucket(len(seqs), 4, 1, 1), pow2_floor(self.tokens_per_call // t)))
        ids_arr = jnp.asarray(ids, jnp.int32)
        results = {}
        for start in range(0, len(seqs), b):
            chunk = seqs[start:start + b]
            tok = np.full((b, t), self.tokenizer.pad_id, np.int32)
            valid = np.zeros((b, t), bool)
            read = np.zeros((b,), np.int32)
            for i, (s, _) in enumerate(chunk):
                tok[i, :len(s)] = s
                valid[i, :len(s)] = True
                read[i] = len(s) - 1
                self.stats.real_tokens += len(s)
            self.stats.shapes.add(("full", b, t, len(ids)))
            self.stats.model_calls += 1
            self.stats.padded_tokens += b * t
            graphdef, state = nnx.split(self.model)
            vl, lse = forward.full_score_jit(graphdef, state, jnp.asarray(tok), jnp.asarray(valid),
                                             jnp.asarray(read), ids_arr)
            vl, lse = np.asarray(vl), np.asarray(lse)
            for i, (_, key) in enumerate(chunk):
                results[key] = (vl[i], lse[i])
            progress.report("judge", len(results), len(seqs), "verdicts")
        return results

    def _run_generate(self, seqs: list[tuple[int, ...]], seed: int = 0) -> list[str]:
        """Generated text per judged sequence. Each sequence samples with its own key, a hash of its tokens
        (`sequence_keys`) and `seed`, so its text does not depend on how the sequences are packed into calls."""
        from rubric_jax.sampling import sample

        cfg = self.config
        texts = []
        for start in range(0, len(seqs), cfg.gen_batch):
            chunk = [list(s) for s in seqs[start:start + cfg.gen_batch]]
            # bucketed batch and prompt length bound the sampler's compilations; padding rows are dropped
            rows = bucket(len(chunk), 4, 1, 1)
            padded = chunk + [chunk[0]] * (rows - len(chunk))
            self.stats.shapes.add(("generate", rows, bucket(max(map(len, chunk)), cfg.len_steps)))
            out = sample(self.model, padded, max_new_tokens=cfg.gen_max_new_tokens, num_samples=1,
                         temperature=cfg.gen_temperature, top_k=cfg.gen_top_k,
                         eos_ids=(-1,) if cfg.gen_ignore_eos else self.tokenizer.eos_ids,
                         pad_id=self.tokenizer.pad_id, prompt_keys=sequence_keys(padded, seed),
                         prompt_length=bucket(max(map(len, chunk)), cfg.len_steps))
            toks, lens = np.asarray(out.tokens), np.asarray(out.lengths)
            self.stats.model_calls += 1
            for i in range(len(chunk)):
                n = int(lens[i])
                self.stats.generated_tokens += n
                texts.append(self.tokenizer.decode(toks[i, :n].tolist()))
            progress.report("judge", len(texts), len(seqs), "generated verdicts")
        return texts

    # ---- tokenization shared by both kinds ---------------------------------------------------
    def encode_group(self, prompt: str, responses: Sequence[str]):
        """(prompt ids, response ids, prompt digest, response digests): the prompt and each response cut to the
        token budgets (counted in the statistics), and the digests the judgment cache keys on."""
        pc = self.config.prompt
        p_ids, cut = self.prompts.cut(prompt, pc.max_prompt_tokens)
        self.stats.prompt_truncations += int(cut)
        r_ids = []
        for resp in responses:
            ids, cut = self.prompts.cut(resp, pc.max_response_tokens)
            self.stats.truncations += int(cut)
            r_ids.append(ids)
        trunc = (pc.max_prompt_tokens, pc.max_response_tokens)
        d_prompt = digest(prompt, repr(trunc))
        d_resp = [digest(x) for x in responses]
        return p_ids, r_ids, d_prompt, d_resp

    def resolve_mode(self, mode: str | None) -> str:
        """A call's mode: its own, or the config's."""
        mode = mode or self.config.mode
        if mode not in MODES:
            raise ValueError(f"mode: unknown {mode!r}; expected one of {MODES}")
        return mode

    def _score(self, kind: str, mode: str, work: list[tuple], suffix_of, ids: list[int], sharing: str,
              seed: int = 0) -> dict:
        """The engine's one door, through which pairwise, pointwise, listwise and verify calls all go.

        work: (cache key, head tokens, body tokens, index into `suffix_of`) per judgment; a sequence is
        head + body + suffix, read at its last token. `suffix_of`: the call's `prompts.Suffixes` (a
        `SuffixTable` in generate mode, which parses the answers); `ids`: the label tokens read. `kind` names
        the sequences' family for the compiled shapes ("pair", "point", "verify", listwise's own). Returns
        {cache key: array}: [label logits..., lse] (read by `rubric_jax.judge.readout`) for logit, sign and
        hard, [parsed verdict] for generate; cached verdicts are served without running the model.
        """
        out, todo = {}, []
        for key, head, body, si in work:
            if key in out:
                continue
            hit = self.cache.get(key)
            if hit is not None:
                out[key] = hit
                self.stats.cache_hits += 1
            else:
                todo.append((key, head, body, si))
                out[key] = None
        if not todo:
            return out
        self.stats.judgments += len(todo)
        if mode == "generate":
            seqs = [head + body + suffix_of[si] for _, head, body, si in todo]
            texts = self._run_generate(seqs, seed)
            for (key, _, _, si), text in zip(todo, texts):
                v = np.asarray([suffix_of.parse(si, text)], np.float32)
                out[key] = v
                self.cache.put(key, v)
            return out
        jobs: dict[tuple, _Job] = {}
        for key, head, body, si in todo:
            job = jobs.setdefault((head, body), _Job(head, body, [], []))
            job.crits.append(si)
            job.out.append(key)
        if sharing == "tree":
            res = self._run_tree(list(jobs.values()), suffix_of.table, ids, kind)
        else:
            res = self._run_full(list(jobs.values()), suffix_of.table, ids)
        for key, (vl, lse) in res.items():
            v = np.concatenate([np.asarray(vl, np.float32), np.asarray([lse], np.float32)])
            out[key] = v
            self.cache.put(key, v)
        return out

    # ---- pairwise ----------------------------------------------------------------------------
    def pairwise(self, prompt: str, responses: Sequence[str], criteria, *, mode: str | None = None,
                 pairing: str | None = None, seed: int = 0, sharing: str | None = None,
                 group_id: int = 0, comparison: str | None = None) -> PairwiseResult:
        """One group; `group_id` as in `pairwise_batch` (the same result as that group inside a batch)."""
        return self.pairwise_batch([prompt], [responses], criteria, mode=mode, pairing=pairing, seed=seed,
                                   sharing=sharing, group_ids=[group_id], comparison=comparison)[0]

    def pairwise_batch(self, prompts: Sequence[str], responses: Sequence[Sequence[str]], criteria, *,
                       mode: str | None = None, pairing: str | None = None, seed: int = 0,
                       sharing: str | None = None, group_ids: Sequence[int] | None = None,
                       comparison: str | None = None) -> list[PairwiseResult]:
        """Judges several prompts' groups together (one set of device calls per Swiss round).

        criteria: a Rubric / list of Criterion shared by all prompts, or one per prompt.
        seed, group_ids: Swiss pairing draws group q's randomness from np.random.default_rng((seed,
        group_ids[q])) alone, so a group's pairings do not depend on the other groups in the call. group_ids
        are non-negative ints, each prompt's global index (e.g. in the step's batch over all processes);
        default range(len(prompts)). Unused by the static pairings.
        comparison: "pairwise" (pairs, scheduled by `pairing`) or "listwise" (the whole group per presentation,
        rubric_jax.judge.listwise: win rates of the same meaning); default the config's.
        """
        from rubric_jax.judge.pairwise_judging import pairwise_batch  # noqa: PLC0415 (it imports this module's names)

        return pairwise_batch(self, prompts, responses, criteria, mode=mode, pairing=pairing, seed=seed,
                              sharing=sharing, group_ids=group_ids, comparison=comparison)

    def _worse_judge(self) -> "Judge":
        """The same model asked for the worse response (prompts.WORSE_PROMPT): its own prompt segments and
        compiled shapes, this judge's cache (its fingerprint keeps the verdicts apart) and statistics."""
        if self._worse is None:
            cfg = dataclasses.replace(self.config, questions="better",
                                      prompt=dataclasses.replace(self.config.prompt, **WORSE_PROMPT))
            self._worse = Judge(self.model, self.tokenizer, cfg, model_id=self.model_id, cache=self.cache)
            self._worse.stats = self.stats
            self._worse._reserved = self._reserved
        return self._worse

    # ---- pointwise ---------------------------------------------------------------------------
    def pointwise(self, prompt: str, responses: Sequence[str], criteria, *, mode: str | None = None,
                  sharing: str | None = None) -> PointwiseResult:
        return self.pointwise_batch([prompt], [responses], criteria, mode=mode, sharing=sharing)[0]

    def pointwise_batch(self, prompts: Sequence[str], responses: Sequence[Sequence[str]], criteria, *,
                        mode: str | None = None, sharing: str | None = None, seed: int = 0) -> list[PointwiseResult]:
        """Scores several prompts' groups together (`rubric_jax.judge.pointwise_judging.pointwise_batch`)."""
        from rubric_jax.judge.pointwise_judging import pointwise_batch  # noqa: PLC0415 (it imports this module's names)

        return pointwise_batch(self, prompts, responses, criteria, mode=mode, sharing=sharing, seed=seed)

    # ---- verify ------------------------------------------------------------------------------------
    def verify_batch(self, prompts: Sequence[str], responses: Sequence[Sequence[str]],
                     constraints: Sequence[Sequence[str]], *, mode: str | None = None,
                     sharing: str | None = None) -> list[VerifyResult]:
        """Whether each response keeps each of its prompt's constraint sentences (RLMR's LLM verifier;
        `rubric_jax.judge.verify`): p_pass[G, K], both label orders averaged."""
        from rubric_jax.judge.verify import verify_batch  # noqa: PLC0415 (it imports this module's names)

        return verify_batch(self, prompts, responses, constraints, mode=mode, sharing=sharing)

    # ---- misc --------------------------------------------------------------------------------
    criteria_per_prompt = staticmethod(criteria_per_prompt)

    def metrics(self) -> dict[str, float]:
        d = self.stats.as_dict()
        d["cache_entries"] = len(self.cache)
        return d


# ---------------------------------------------------------------------------------------------
# Module-level API: a fresh Judge per call (no registry that could serve a stale model or config);
# the compiled scoring programs are shared anyway, since jit keys them on the model's graph and shapes.


def pairwise(model, tokenizer, prompt: str, responses: Sequence[str], criteria, mode: str | None = None, *,
             pairing: str = "all", seed: int = 0, return_result: bool = False, **config):
    """p[G, G, C] = p_c(i > j), both presentation orders averaged (p + p^T = 1 off the diagonal,
    0.5 on the diagonal and on pairs the pairing did not judge). criteria: a Rubric or list of Criterion.
    mode: default JudgeConfig's ("sign": 1, 0 or 1/2 by the order-averaged preference; "logit" for the
    soft probability).
    return_result=True gives the full PairwiseResult (mask, win rates, per-order verdicts, metrics)."""
    res = Judge(model, tokenizer, **config).pairwise(prompt, responses, criteria, mode=mode, pairing=pairing,
                                                         seed=seed)
    return res if return_result else res.p


def pointwise(model, tokenizer, prompt: str, responses: Sequence[str], criteria, mode: str = "logit", *,
              return_result: bool = False, **config):
    """(s[G, C], valid[G, C]): score per response and criterion on 0..m_c (expected score in logit mode,
    argmax in hard mode, parsed in generate mode) and whether it could be read."""
    res = Judge(model, tokenizer, **config).pointwise(prompt, responses, criteria, mode=mode)
    return res if return_result else (res.scores, res.valid)


__all__ = ["Judge", "pairwise", "pointwise"]
