"""Judge engine: prefix-shared scoring parity, order averaging, modes, pairings, cache, errors, SmolLM2 sanity.

Tiny random Qwen3 tests share one Judge and a few fixed shapes so each scoring function compiles once.
"""

import random

import numpy as np
from flax import nnx
import pytest

from conftest import last_token_logits
from rubric_jax.judge import Judge, PromptConfig, pairwise, pointwise
from rubric_jax.judge.cache import JudgmentCache
from rubric_jax.judge.pairings import all_pairs, circular_pairs, num_swiss_rounds, swiss_round
from rubric_jax.judge.prompts import VerdictTokenError
from rubric_jax.judge.engine import bucket
from rubric_jax.judge.readout import read_pair_text as _parse_pair, read_score_text as _parse_score
from rubric_jax.judge.prompts import PromptBuilder
from rubric_jax.rewards import hard_verdicts, win_rates
from rubric_jax.rubrics import Criterion, Rubric

PROMPT = "Write two sentences about a lighthouse keeper."
RESPONSES = [
    "The keeper climbed the stairs at dusk. Her lamp cut through the fog.",
    "A lighthouse stands by the sea and a man lives in it.",
    "Waves. Light. Night again, and the old keeper counts the ships.",
]
CRITERIA = [
    Criterion(id="clarity", name="Clarity", check="The text is clear and easy to follow."),
    Criterion(id="imagery", name="Imagery", check="The text uses concrete sensory details.", max_points=3,
              levels=("None.", "A little.", "Some.", "Vivid throughout.")),
]


@pytest.fixture(scope="module")
def judge(tiny_qwen3_model, qwen_tokenizer):
    return Judge(tiny_qwen3_model, qwen_tokenizer)


def _reference(model, tok, seqs, ids):
    """Verdict-token logits at the last token of each full sequence: plain forward, no cache."""
    return last_token_logits(model, seqs, tok.pad_id)[:, ids]


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.slow
def test_prefix_shared_equals_full_sequences(judge, tiny_qwen3_model, qwen_tokenizer):
    res = judge.pairwise(PROMPT, RESPONSES, CRITERIA, mode="logit")
    pts = judge.pointwise(PROMPT, RESPONSES, CRITERIA, mode="logit")
    pb = PromptBuilder(qwen_tokenizer)
    p_ids = qwen_tokenizer.encode(PROMPT)
    r_ids = [qwen_tokenizer.encode(r) for r in RESPONSES]
    g = len(RESPONSES)
    pairs = [(a, b) for a in range(g) for b in range(g) if a != b]
    seqs = [pb.head("pair", p_ids, r_ids[a]) + pb.body(r_ids[b]) + pb.suffix("pair", c) for a, b in pairs
            for c in CRITERIA]
    seqs += [pb.head("point", p_ids, r_ids[a]) + pb.suffix("point", c) for a in range(g) for c in CRITERIA]
    label_ids = [qwen_tokenizer.token_id(x) for x in (" A", " B")]
    digits = [qwen_tokenizer.token_id(str(k)) for k in range(4)]
    ref = _reference(tiny_qwen3_model, qwen_tokenizer, seqs, label_ids + digits)
    n_pair = len(pairs) * len(CRITERIA)
    ref_first = _softmax(ref[:n_pair, :2])[:, 0].reshape(len(pairs), len(CRITERIA))
    for k, (a, b) in enumerate(pairs):
        np.testing.assert_allclose(res.p_first[a, b], ref_first[k], atol=1e-4)
    ref_pt = ref[n_pair:].reshape(g, len(CRITERIA), -1)
    np.testing.assert_allclose(pts.probs[:, 0, :2], _softmax(ref_pt[:, 0, 2:4]), atol=1e-4)
    np.testing.assert_allclose(pts.probs[:, 1, :4], _softmax(ref_pt[:, 1, 2:6]), atol=1e-4)
    # the token sequences are the chat template rendered with the judge prompt (spot check one)
    text = qwen_tokenizer.decode(seqs[0], skip_special_tokens=False)
    assert text.startswith("<|im_start|>system") and RESPONSES[0] in text and RESPONSES[1] in text
    assert text.index(RESPONSES[0]) < text.index(RESPONSES[1]) and text.endswith(PromptConfig().pairwise_cue)
    # unshared full-sequence scoring through the engine agrees too
    unshared = Judge(tiny_qwen3_model, qwen_tokenizer, sharing="none").pairwise(PROMPT, RESPONSES, CRITERIA,
                                                                                 mode="logit")
    np.testing.assert_allclose(unshared.p, res.p, atol=1e-4)


@pytest.mark.slow
def test_unrolled_layers_match_scan(tiny_qwen3_model, qwen_tokenizer, judge):
    res = judge.pairwise(PROMPT, RESPONSES, CRITERIA)
    unrolled_model = nnx.merge(*nnx.split(tiny_qwen3_model)).configure(scan_layers=False)  # same arrays
    unrolled = Judge(unrolled_model, qwen_tokenizer).pairwise(PROMPT, RESPONSES, CRITERIA)
    np.testing.assert_allclose(unrolled.p_first, res.p_first, atol=1e-5)


@pytest.mark.slow
def test_both_orders_sum_to_one(judge, tiny_qwen3_model, qwen_tokenizer):
    res = judge.pairwise(PROMPT, RESPONSES, CRITERIA, mode="logit")
    p = pairwise(tiny_qwen3_model, qwen_tokenizer, PROMPT, RESPONSES, CRITERIA, mode="logit")  # the public function
    np.testing.assert_allclose(p, res.p, atol=1e-6)
    # its default is JudgeConfig's: sign
    p_default = pairwise(tiny_qwen3_model, qwen_tokenizer, PROMPT, RESPONSES, CRITERIA)
    np.testing.assert_array_equal(p_default, np.where(res.p > 0.5, 1.0, np.where(res.p < 0.5, 0.0, 0.5)))
    g, c = len(RESPONSES), len(CRITERIA)
    assert res.p.shape == (g, g, c)
    off = ~np.eye(g, dtype=bool)
    np.testing.assert_array_equal((res.p + res.p.transpose(1, 0, 2))[off], 1.0)
    np.testing.assert_array_equal(res.p[np.eye(g, dtype=bool)], 0.5)
    # p(i > j) is the average of "i first wins" and "j first loses"
    expect = (res.p_first + 1 - res.p_first.transpose(1, 0, 2)) / 2
    np.testing.assert_allclose(res.p[off], expect[off], atol=1e-6)
    np.testing.assert_allclose(res.win_rates.mean(0), 0.5, atol=1e-6)
    assert res.mask[off].all() and res.valid[off].all()
    m = res.metrics
    assert 0 <= m["position_bias"] <= 1 and m["invalid_fraction"] == 0.0 and 0 < m["verdict_entropy"] <= np.log(2)
    np.testing.assert_allclose(m["position_bias"], res.p_first[off].mean(), atol=1e-6)


@pytest.mark.slow
def test_hard_mode(judge):
    soft = judge.pairwise(PROMPT, RESPONSES, CRITERIA, mode="logit")
    hard = judge.pairwise(PROMPT, RESPONSES, CRITERIA, mode="hard")
    g = len(RESPONSES)
    off = ~np.eye(g, dtype=bool)
    assert set(np.unique(hard.p[off])) <= {0.0, 0.5, 1.0}
    np.testing.assert_array_equal((hard.p + hard.p.transpose(1, 0, 2))[off], 1.0)
    pf = soft.p_first
    expect = np.asarray(hard_verdicts(np.stack([pf, 1 - pf], -1)))
    np.testing.assert_array_equal(hard.p[off], expect[off])
    # hard mode reuses the cached verdicts of the soft pass: no new model work
    assert hard.metrics["judgments"] == soft.metrics["judgments"]


@pytest.mark.slow
def test_sign_mode_and_the_spread_of_every_readout(judge):
    assert judge.config.mode == "sign"  # the default
    soft = judge.pairwise(PROMPT, RESPONSES, CRITERIA, mode="logit")
    sign = judge.pairwise(PROMPT, RESPONSES, CRITERIA)
    hard = judge.pairwise(PROMPT, RESPONSES, CRITERIA, mode="hard")
    off = ~np.eye(len(RESPONSES), dtype=bool)
    # sign: the logit mode's order-averaged p compared with 1/2
    want = np.where(soft.p > 0.5, 1.0, np.where(soft.p < 0.5, 0.0, 0.5))
    np.testing.assert_array_equal(sign.p[off], want[off])
    np.testing.assert_array_equal(sign.p_first, soft.p_first)
    # each result reports the spread every readout of its verdicts gives (std over the group, mean over criteria)
    for name, res in (("logit", soft), ("sign", sign), ("hard", hard)):
        expect = float(np.asarray(res.win_rates).std(axis=0).mean())
        for other in (soft, sign, hard):
            assert other.metrics[f"spread_{name}"] == pytest.approx(expect, abs=1e-6)
    assert sign.metrics["spread_sign"] > soft.metrics["spread_logit"]  # discrete verdicts spread the win rates
    # pointwise scores have no orders to average: sign reads the expected score, as logit does
    crit = Rubric(name="r", criteria=tuple(CRITERIA))
    np.testing.assert_array_equal(judge.pointwise(PROMPT, RESPONSES, crit).scores,
                                  judge.pointwise(PROMPT, RESPONSES, crit, mode="logit").scores)


@pytest.mark.slow
def test_pointwise(judge, tiny_qwen3_model, qwen_tokenizer):
    s, valid = pointwise(tiny_qwen3_model, qwen_tokenizer, PROMPT, RESPONSES, CRITERIA)
    assert s.shape == valid.shape == (3, 2) and valid.all()
    assert (s[:, 0] >= 0).all() and (s[:, 0] <= 1).all() and (s[:, 1] <= 3).all()
    hard = judge.pointwise(PROMPT, RESPONSES, Rubric(name="r", criteria=tuple(CRITERIA)), mode="hard")
    np.testing.assert_array_equal(hard.scores, np.argmax(hard.probs, -1))
    assert hard.probs[:, 0, 2:].sum() == 0  # digits above m_c get no mass
    # a verdict-mass threshold no model reaches marks everything invalid, without crashing
    strict = Judge(tiny_qwen3_model, qwen_tokenizer, min_verdict_mass=0.999)
    r = strict.pointwise(PROMPT, RESPONSES, CRITERIA)
    assert not r.valid.any() and r.metrics["invalid_fraction"] == 1.0
    p = strict.pairwise(PROMPT, RESPONSES, CRITERIA)
    off = ~np.eye(3, dtype=bool)
    np.testing.assert_array_equal(p.p[off], 0.5)


def test_pairings():
    assert all_pairs(8).shape == (28, 2)
    assert circular_pairs(8).shape == (8, 2)
    rng = np.random.default_rng(0)
    for g in (2, 5, 8, 16):
        played = np.zeros((g, g), bool)
        seen = set()
        for _ in range(num_swiss_rounds(g)):
            prs = swiss_round(rng.random(g), played, rng)
            flat = prs.reshape(-1).tolist()
            assert len(flat) == len(set(flat)) == 2 * (g // 2)  # each rollout at most once per round
            for i, j in prs:
                assert (i, j) not in seen  # no rematch while fresh opponents remain
                seen.add((i, j))
                played[i, j] = played[j, i] = True
            if g % 2:
                bye = (set(range(g)) - set(flat)).pop()
                played[bye, bye] = True
        assert len(seen) == (g // 2) * num_swiss_rounds(g)
    assert num_swiss_rounds(8) == 3 and num_swiss_rounds(16) == 4


@pytest.mark.slow
def test_engine_pairings_and_mask(judge):
    resps = RESPONSES + ["Gulls cried over the rocks at dawn while the fog rolled in."]
    g, c = len(resps), len(CRITERIA)
    for pairing, n_pairs in (("circular", 4), ("swiss", 2 * num_swiss_rounds(4)), ("all", 6)):
        before = judge.stats.judgments + judge.stats.cache_hits
        res = judge.pairwise(PROMPT, resps, CRITERIA, pairing=pairing, seed=1)
        assert res.mask.sum() == 2 * n_pairs and (res.mask == res.mask.T).all()
        assert judge.stats.judgments + judge.stats.cache_hits - before == 2 * n_pairs * c
        np.testing.assert_array_equal(res.p[~res.mask & ~np.eye(g, dtype=bool)], 0.5)
        np.testing.assert_allclose(res.win_rates, np.asarray(win_rates(res.p, res.mask)), atol=1e-6)


FOCAL = RESPONSES + ["Gulls cried over the rocks at dawn while the fog rolled in.",
                     "He trimmed the wick and wrote the weather in his log.",
                     "The light turned all night; nobody came."]
OTHERS = [("Describe a market at noon.", ["Stalls of fruit and shouting.", "It was busy.", "Fish, bread, noise.",
                                          "The sun beat on the awnings over the melon sellers."]),
          ("Write a line about rain.", ["Rain fell.", "The gutters sang all night.", "Grey, then silver, then grey.",
                                        "Rain again.", "The street shone under the lamps.",
                                        "Drops ticked on the tin roof.", "It poured.", "Clouds wept softly."])]


@pytest.mark.slow
def test_swiss_pairings_do_not_depend_on_the_batch(tiny_qwen3_model, qwen_tokenizer):
    # No cache: the batch's verdicts are recomputed in other packings, not served from the lone calls.
    j = Judge(tiny_qwen3_model, qwen_tokenizer, cache_entries=0)
    crit = CRITERIA[:1]
    prompts = [OTHERS[0][0], PROMPT, OTHERS[1][0]]
    groups = [OTHERS[0][1], FOCAL, OTHERS[1][1]]
    batch = j.pairwise_batch(prompts, groups, crit, pairing="swiss", seed=3, group_ids=[10, 11, 12])
    alone = j.pairwise(PROMPT, FOCAL, crit, pairing="swiss", seed=3, group_id=11)
    pair = j.pairwise_batch([PROMPT, OTHERS[1][0]], [FOCAL, OTHERS[1][1]], crit, pairing="swiss", seed=3,
                            group_ids=[11, 12])
    g = len(FOCAL)
    assert alone.mask.sum() == 2 * (g // 2) * num_swiss_rounds(g)
    for other in (batch[1], pair[0]):
        np.testing.assert_array_equal(other.mask, alone.mask)
        np.testing.assert_allclose(other.p, alone.p, atol=1e-5)
        np.testing.assert_allclose(other.win_rates, alone.win_rates, atol=1e-5)
    np.testing.assert_array_equal(pair[1].mask, batch[2].mask)  # the last group too, at another position
    # the group id is what matters: other ids (or seeds) draw other pairings for the same group (not every
    # one: after round 1 the standings steer the pairing, so some draws coincide)
    masks = lambda seed, ids: [j.pairwise(PROMPT, FOCAL, crit, pairing="swiss", seed=seed, group_id=i).mask
                               for i in ids]  # noqa: E731
    assert any(not np.array_equal(m, alone.mask) for m in masks(3, (12, 13, 14)))
    assert any(not np.array_equal(m, alone.mask) for m in masks(4, (11,)) + masks(5, (11,)))
    # default group ids are the positions in the call
    default = j.pairwise_batch([OTHERS[0][0], PROMPT], [OTHERS[0][1], FOCAL], crit, pairing="swiss", seed=3)
    np.testing.assert_array_equal(
        default[1].mask, j.pairwise(PROMPT, FOCAL, crit, pairing="swiss", seed=3, group_id=1).mask)
    with pytest.raises(ValueError, match="group_ids"):
        j.pairwise_batch(prompts, groups, crit, pairing="swiss", group_ids=[1, 2])


@pytest.mark.slow
def test_generated_text_does_not_depend_on_packing(tiny_qwen3_model, qwen_tokenizer):
    # Real sampling (no top-k): each judged sequence draws with a key from its own tokens.
    kw = dict(mode="generate", gen_max_new_tokens=6, gen_temperature=1.0, gen_top_k=0)
    packed = Judge(tiny_qwen3_model, qwen_tokenizer, **kw)
    single = Judge(tiny_qwen3_model, qwen_tokenizer, gen_batch=1, **kw)
    seqs = [tuple(qwen_tokenizer.encode(r)) for r in RESPONSES]  # similar lengths: one padded length
    together = packed._run_generate(seqs)
    assert single._run_generate(seqs) == together
    assert packed._run_generate(seqs[::-1]) == together[::-1]
    assert packed._run_generate(seqs[1:2]) == together[1:2]
    assert len(set(together)) > 1


def test_cache_hits_avoid_recompute(tiny_qwen3_model, qwen_tokenizer):
    j = Judge(tiny_qwen3_model, qwen_tokenizer)
    first = j.pairwise(PROMPT, RESPONSES, CRITERIA)
    n = 3 * 2 * len(CRITERIA)
    assert j.stats.judgments == n and j.stats.cache_hits == 0
    calls = j.stats.model_calls
    again = j.pairwise(PROMPT, RESPONSES, CRITERIA)
    assert j.stats.judgments == n and j.stats.cache_hits == n and j.stats.model_calls == calls
    np.testing.assert_array_equal(first.p, again.p)
    # one response changed: only the 2 (G - 1) C judgments that involve it are recomputed
    changed = RESPONSES[:2] + ["A new third answer about the lighthouse."]
    j.pairwise(PROMPT, changed, CRITERIA)
    assert j.stats.judgments == n + 2 * 2 * len(CRITERIA)
    # keys separate the presentation order and the criterion
    k = lambda a, b, c: JudgmentCache.key("m", "fp", "pair", "logit", "p", a, b, c)  # noqa: E731
    assert len({k("x", "y", "c"), k("y", "x", "c"), k("x", "y", "d")}) == 3


@pytest.mark.slow
def test_truncation_counted(tiny_qwen3_model, qwen_tokenizer):
    j = Judge(tiny_qwen3_model, qwen_tokenizer, max_response_tokens=12)
    res = j.pairwise(PROMPT, RESPONSES, CRITERIA)
    assert j.stats.truncations == 3 and res.p.shape == (3, 3, 2)
    assert j.metrics()["truncations"] == 3


def test_bucketing_bounds_compilations(judge):
    b = [bucket(n) for n in range(1, 2000)]
    assert len(set(b)) <= 30 and all(x >= n for n, x in zip(range(1, 2000), b))
    assert all(x <= 1.25 * n + 8 for n, x in zip(range(16, 2000), b[15:]))
    judge.pairwise(PROMPT, RESPONSES, CRITERIA)  # compiles its shapes here, whichever tests ran before
    before = judge.stats.compilations
    judge.pairwise("Write two sentences about a lighthouse keepers.",
                   [r.replace("keeper", "keeper's") for r in RESPONSES], CRITERIA)
    assert judge.stats.compilations == before  # slightly different lengths, same bucketed shapes


def test_unknown_verdict_tokens(tiny_qwen3_model, qwen_tokenizer):
    with pytest.raises(VerdictTokenError, match="not a single token"):
        Judge(tiny_qwen3_model, qwen_tokenizer, labels=("first one", " B"))
    with pytest.raises(VerdictTokenError, match="repeated"):
        Judge(tiny_qwen3_model, qwen_tokenizer, labels=(" A", " A"))
    j = Judge(tiny_qwen3_model, qwen_tokenizer)
    big = Criterion(id="big", name="Big", check="x", max_points=12, levels=tuple(str(k) for k in range(13)))
    big_read = j.pointwise(PROMPT, RESPONSES, [big])  # past 9: read digit by digit (see the two-digit tests)
    assert big_read.valid.all() and np.isclose(big_read.probs[:, 0, :13].sum(-1), 1.0).all()
    with pytest.raises(ValueError, match="mode"):
        j.pairwise(PROMPT, RESPONSES, CRITERIA, mode="vibes")
    with pytest.raises(TypeError, match="Criterion"):
        j.pairwise(PROMPT, RESPONSES, ["not a criterion"])


@pytest.mark.slow
def test_generate_answers_parsed_or_invalid(tiny_qwen3_model, qwen_tokenizer, monkeypatch):
    assert _parse_pair("Both are fine but A is clearer.\nAnswer: B", ("A", "B")) == 1
    assert _parse_pair("**Answer:** Response A", ("A", "B")) == 0
    assert _parse_pair(" A", ("A", "B")) == 0
    assert _parse_pair("I cannot decide.", ("A", "B")) == -1
    assert _parse_score("Reasons...\nScore: 3", 4) == 3 and _parse_score("Score: 7", 4) == -1
    assert _parse_score("no idea", 4) == -1

    j = Judge(tiny_qwen3_model, qwen_tokenizer, mode="generate")
    replies = iter(["Answer: A", "garbage", "Answer: B", "???", "...", "also garbage"])
    monkeypatch.setattr(j, "_run_generate", lambda seqs, seed=0: [next(replies) for _ in seqs])
    res = j.pairwise(PROMPT, RESPONSES, CRITERIA[:1])  # ordered pairs (0,1) (1,0) (0,2) (2,0) (1,2) (2,1)
    assert res.valid[:, :, 0].sum() == 2 and res.metrics["invalid_fraction"] == pytest.approx(4 / 6)
    off = ~np.eye(3, dtype=bool)
    np.testing.assert_array_equal((res.p + res.p.transpose(1, 0, 2))[off], 1.0)
    assert res.p[0, 1, 0] == 1.0  # (0 first) answered A; (1 first) unreadable: the readable order decides
    assert res.p[0, 2, 0] == 0.0  # (0 first) answered B; (2 first) unreadable
    assert res.p[1, 2, 0] == 0.5  # both orders unreadable

    # the real sampler on a random model: whatever it writes, nothing crashes
    j2 = Judge(tiny_qwen3_model, qwen_tokenizer, mode="generate", gen_max_new_tokens=4)
    res = j2.pairwise(PROMPT, RESPONSES[:2], CRITERIA[:1])
    assert res.p.shape == (2, 2, 1) and res.p[0, 1, 0] + res.p[1, 0, 0] == 1.0
    assert j2.stats.generated_tokens > 0
    r = j2.pointwise(PROMPT, RESPONSES[:2], CRITERIA[:1])
    assert r.scores.shape == r.valid.shape == (2, 1)


# ---- the embedded SmolLM2 as a judge -----------------------------------------------------------

QA = [
    ("What is the capital of France?",
     "The capital of France is Paris, a large city on the river Seine known for the Eiffel Tower."),
    ("Why is the sky blue?",
     "The sky looks blue because air molecules scatter blue sunlight much more strongly than red light."),
    ("How do plants make their food?",
     "Plants make their food by photosynthesis, using sunlight to turn water and carbon dioxide into sugar."),
    ("What should I do if I cut my finger?",
     "Wash the cut with clean water, press a clean cloth on it to stop the bleeding, and cover it with a bandage."),
    ("Why do we have seasons on Earth?",
     "We have seasons because the Earth is tilted, so each half gets more direct sunlight at different times of "
     "the year."),
    ("How can I fall asleep faster?",
     "Go to bed at the same time every night, keep your room dark and quiet, and avoid screens for an hour "
     "before sleep."),
    ("What is the boiling point of water?",
     "At sea level, pure water boils at one hundred degrees Celsius, which is two hundred and twelve degrees "
     "Fahrenheit."),
    ("Write one sentence about a dog at the beach.",
     "The happy dog ran along the sandy beach, barking at the waves and chasing the seagulls into the wind."),
    ("How do I make a cup of tea?",
     "Boil some water, pour it over a tea bag in a cup, wait three minutes, then remove the bag and add milk if "
     "you like."),
    ("Why is exercise good for health?",
     "Regular exercise makes the heart and muscles stronger, helps control weight, and improves mood and sleep."),
]


def _shuffled(text, seed):
    words = text.rstrip(".").split()
    rng = random.Random(seed)
    out = list(words)
    while out == words:
        rng.shuffle(out)
    return " ".join(out).lower() + "."


@pytest.mark.smollm2
@pytest.mark.slow
def test_smollm2_prefers_coherent_answers(smollm2, smollm2_tokenizer):
    """A coherent on-topic answer beats the same words shuffled in >= 80% of pairs, orders averaged.

    Each pair is judged with the coherent answer shown first and shown second; p(coherent > shuffled)
    averages the two, so a pure position preference cannot pass. Listing the shuffled answer first
    must give the same verdicts (the engine, not the caller, handles order).
    """
    crit = Criterion(id="clarity", name="Clarity", check="The response makes sense and is easy to read.")
    j = Judge(smollm2, smollm2_tokenizer, lane_tokens=32)
    prompts = [q for q, _ in QA]
    groups = [[a, _shuffled(a, i)] for i, (_, a) in enumerate(QA)]
    res = j.pairwise_batch(prompts, groups, [crit])
    p = np.asarray([r.p[0, 1, 0] for r in res])
    assert (p > 0.5).mean() >= 0.8, p
    flipped = j.pairwise_batch(prompts, [g[::-1] for g in groups], [crit])
    np.testing.assert_allclose([r.p[1, 0, 0] for r in flipped], p, atol=1e-6)
    assert j.stats.judgments == 2 * len(QA)  # the flipped listing is served from the cache


BINARY = Criterion(id="sea", name="Sea", check="The text mentions the sea.", max_points=3, scoring="binary",
                   levels=("The sea is not mentioned.", "The sea is mentioned."))


@pytest.mark.slow
def test_binary_criterion_reads_only_zero_or_max(judge, tiny_qwen3_model, qwen_tokenizer):
    """A binary criterion's verdict is read over the digits 0 and m only: probabilities equal a softmax of
    the reference model's logits at those two digits, and the hard score is one of them."""
    from rubric_jax.judge.prompts import digit_token_ids

    soft = judge.pointwise(PROMPT, RESPONSES, [BINARY], mode="logit")
    hard = judge.pointwise(PROMPT, RESPONSES, [BINARY], mode="hard")
    pb = PromptBuilder(qwen_tokenizer)
    seqs = [pb.head("point", qwen_tokenizer.encode(PROMPT), qwen_tokenizer.encode(r)) + pb.suffix("point", BINARY)
            for r in RESPONSES]
    ref = _softmax(_reference(tiny_qwen3_model, qwen_tokenizer, seqs, digit_token_ids(qwen_tokenizer, 3))[:, [0, 3]])
    np.testing.assert_allclose(soft.probs[:, 0, [0, 3]], ref, atol=2e-5)
    assert soft.probs[:, 0, [1, 2]].sum() == 0
    np.testing.assert_allclose(soft.scores[:, 0], 3 * ref[:, 1], atol=1e-4)
    np.testing.assert_array_equal(hard.scores[:, 0], np.where(ref[:, 1] > ref[:, 0], 3, 0))


def test_generate_parse_and_seeds_for_binary_criteria(qwen_tokenizer):
    from rubric_jax.judge.packing import sequence_keys
    from rubric_jax.judge.prompts import SuffixTable

    table = SuffixTable(PromptBuilder(qwen_tokenizer), "point", True)
    i = table.add(BINARY)
    assert table.parse(i, "It does.\nScore: 3") == 3 and table.parse(i, "Score: 0") == 0
    assert table.parse(i, "Score: 2") == -1  # between the two allowed scores: unreadable
    j = table.add(CRITERIA[1])
    assert table.parse(j, "Score: 2") == 2
    import jax

    seqs = [(1, 2, 3), (4, 5)]
    k0, k0b, k1 = sequence_keys(seqs), sequence_keys(seqs, 0), sequence_keys(seqs, 1)
    assert (jax.random.key_data(k0) == jax.random.key_data(k0b)).all()
    assert not (jax.random.key_data(k0) == jax.random.key_data(k1)).all(axis=-1).any()


SCALE20 = Criterion(id="craft20", name="Craft", check="Sentences are precise and varied.", max_points=20,
                    levels=tuple(f"level {k}" for k in range(21)))
SCALE10 = Criterion(id="fit10", name="Fit", check="The text answers the task.", max_points=10,
                    levels=tuple(f"level {k}" for k in range(11)))


def test_two_digit_probs_by_hand():
    """The readout's formula on made-up next-token logits (the lse is 0, so each logit is a log-probability):
    0..20 with P0 = {0: .1, 1: .3, 2: .4, 5: .1} (.1 elsewhere in the vocabulary), after "1": P(4) = .5,
    P(0) = .25 (so the number ends with .25), after "2": P(0) = .6, P(7) = .2 ("27" is off the scale)."""
    from rubric_jax.judge.pointwise_judging import two_digit_probs

    def logits(probs):
        v = np.full(11, -np.inf)
        for d, p in probs.items():
            v[d] = np.log(p)
        v[10] = 0.0
        return v

    pr, log_mass = two_digit_probs(logits({0: .1, 1: .3, 2: .4, 5: .1}),
                                   {1: logits({4: .5, 0: .25}), 2: logits({0: .6, 7: .2})}, range(21))
    q = np.zeros(21)
    q[0], q[5] = .1, .1
    q[1], q[14], q[10] = .3 * .25, .3 * .5, .3 * .25
    q[2], q[20] = .4 * (1 - .8), .4 * .6
    np.testing.assert_allclose(pr, q / q.sum(), atol=1e-12)
    assert log_mass == pytest.approx(np.log(q.sum()))
    # a binary 0-or-20 criterion: only those two compete
    pr, _ = two_digit_probs(logits({0: .1, 2: .4}), {1: logits({}), 2: logits({0: .6})}, (0, 20))
    np.testing.assert_allclose(pr, [.1 / (.1 + .24), .24 / (.1 + .24)])
    # no allowed score has probability (the judge writes no digit): unreadable
    pr, log_mass = two_digit_probs(logits({}), {1: logits({}), 2: logits({})}, range(21))
    assert np.isnan(pr).all() and log_mass == -np.inf


@pytest.mark.slow
def test_two_digit_scales_read_digit_by_digit_equal_full_sequences(judge, tiny_qwen3_model, qwen_tokenizer):
    """0..20 and 0..10 scales in logit mode against plain forwards of the full sequences: the criterion's
    suffix, and the suffix followed by each leading digit; expected score and hard score from the same
    probabilities. A one-digit criterion in the same call reads as before."""
    from rubric_jax.judge.prompts import digit_token_ids

    crits = [SCALE20, SCALE10, CRITERIA[1]]
    soft = judge.pointwise(PROMPT, RESPONSES, crits, mode="logit")
    hard = judge.pointwise(PROMPT, RESPONSES, crits, mode="hard")
    pb = PromptBuilder(qwen_tokenizer)
    ids = digit_token_ids(qwen_tokenizer, 9)
    heads = [pb.head("point", qwen_tokenizer.encode(PROMPT), qwen_tokenizer.encode(r)) for r in RESPONSES]
    for c, cr in enumerate(crits[:2]):
        lead = range(1, cr.max_points // 10 + 1)
        seqs = [list(h) + list(pb.suffix("point", cr)) + ([ids[d]] if d else []) for h in heads for d in [0, *lead]]
        last = last_token_logits(tiny_qwen3_model, seqs, qwen_tokenizer.pad_id)
        logp = last - np.log(np.exp(last - last.max(-1, keepdims=True)).sum(-1, keepdims=True)) - last.max(
            -1, keepdims=True)
        p = np.exp(logp[:, ids]).reshape(len(RESPONSES), 1 + len(lead), 10)
        for a in range(len(RESPONSES)):
            q = np.array([p[a, 0, s] * (1 - p[a, s].sum()) if 1 <= s <= len(lead) else
                          (p[a, 0, s] if s < 10 else p[a, 0, s // 10] * p[a, s // 10, s % 10])
                          for s in range(cr.max_points + 1)])
            np.testing.assert_allclose(soft.probs[a, c, :cr.max_points + 1], q / q.sum(), atol=2e-5)
            assert soft.scores[a, c] == pytest.approx(np.dot(q / q.sum(), np.arange(cr.max_points + 1)), abs=1e-3)
            assert hard.scores[a, c] == np.argmax(q)
    assert soft.valid.all() and (soft.scores[:, 2] <= 3).all()
    one = judge.pointwise(PROMPT, RESPONSES, [CRITERIA[1]], mode="logit")
    np.testing.assert_allclose(soft.probs[:, 2, :4], one.probs[:, 0, :4], atol=1e-6)


def test_a_tokenizer_that_merges_digits_cannot_read_two_digit_scales(qwen_tokenizer):
    from rubric_jax.judge.prompts import check_digit_by_digit, digit_token_ids

    ids = digit_token_ids(qwen_tokenizer, 9)
    check_digit_by_digit(qwen_tokenizer, ids, 20)  # Qwen's tokenizer writes numbers digit by digit

    class Merging:
        name = "merging"

        def encode(self, text):
            return [999] if text == "14" else [ids[int(ch)] for ch in text]

    with pytest.raises(VerdictTokenError, match="writes 14 as tokens \\[999\\], not digit by digit"):
        check_digit_by_digit(Merging(), ids, 20)
    check_digit_by_digit(Merging(), ids, 13)
    with pytest.raises(VerdictTokenError, match="at most two digits"):
        check_digit_by_digit(Merging(), ids, 100)


def test_text_and_served_readouts_are_one_for_local_generate_and_remote_judges():
    """rubric_jax.judge.readout reads a written pairwise verdict for the local generate mode and for a served judge
    (rubric_jax.judge.remote.p_from_completion) alike: the last written answer, else an opening label in its own case."""
    import math

    from rubric_jax.judge.remote import p_from_completion
    from rubric_jax.judge.readout import read_pair_text, read_pair_top_logprobs

    cases = {"A. It is clearer.": 0, "**B**": 1, "Response B": 1, "Answer: A, though on reflection... Verdict: B": 1,
             "a clearer answer would help": -1, "Both. Neither.": -1, "": -1, "B\n\nBecause A rambles.": 1}
    for text, want in cases.items():
        assert read_pair_text(text) == want, text
        assert p_from_completion(text, None) == (None if want < 0 else 1.0 - want)
    assert read_pair_text("Answer: 2", ("1", "2")) == 1  # any two labels
    # the labels' spellings pooled, then renormalised over the two: (0.3 + 0.1) / (0.3 + 0.1 + 0.2)
    lp = [{"A": math.log(0.3), " a": math.log(0.1), "B": math.log(0.2), "The": math.log(0.4)}]
    assert read_pair_top_logprobs(lp) == pytest.approx(2 / 3, rel=1e-12)
    # a markup token first: the next position holds the labels
    lp = [{"**": -0.01}, {"B": -1.0, "A": -2.0}]
    assert read_pair_top_logprobs(lp) == pytest.approx(math.exp(-2) / (math.exp(-2) + math.exp(-1)), rel=1e-12)
    assert read_pair_top_logprobs([{"x": -0.1}] * 4) is None and read_pair_top_logprobs(None) is None
    assert p_from_completion("B", lp) == pytest.approx(read_pair_top_logprobs(lp))  # log-probabilities first
