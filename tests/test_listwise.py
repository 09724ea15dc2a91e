"""Listwise group judging: presentation orders, the Plackett-Luce readout (a known ranking comes back, a
Latin square cancels a planted position bias exactly and one presentation does not, scores average 1/2,
p + p^T = 1), and the engine path, whose label logits equal a plain forward of each full sequence."""

import jax.numpy as jnp
import numpy as np
import pytest

from conftest import last_token_logits
from rubric_jax.judge import Judge, JudgeConfig
from rubric_jax.judge.listwise import ListwisePrompts, listwise_batch
from rubric_jax.judge.prompts import PromptConfig
from rubric_jax.rewards import listwise as lw
from rubric_jax.rubrics.types import Criterion

# ---- presentation orders ------------------------------------------------------------------------------------


@pytest.mark.parametrize("g", [1, 2, 5, 8])
def test_default_orders_are_a_latin_square(g):
    o = lw.presentation_orders(g, g, seed=3)
    assert o.shape == (g, g)
    assert np.all(np.sort(o, axis=1) == np.arange(g))  # each row a permutation
    for col in o.T:  # each position holds every response once
        assert sorted(col.tolist()) == list(range(g))
    assert lw.is_latin(o)
    np.testing.assert_array_equal(lw.presentation_orders(g, None, seed=3), o)


def test_orders_are_deterministic_by_seed_and_other_k():
    a, b = lw.presentation_orders(6, 6, seed=1), lw.presentation_orders(6, 6, seed=1)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, lw.presentation_orders(6, 6, seed=2))
    for k in (1, 2, 3, 4, 7, 12):
        o = lw.presentation_orders(6, k, seed=0)
        assert o.shape == (k, 6) and np.all(np.sort(o, axis=1) == np.arange(6))
        assert lw.is_latin(o) == (k % 6 == 0)
    # k < G: distinct shifts, so no response sits twice in one position
    o = lw.presentation_orders(6, 3, seed=0)
    assert all(len(set(col.tolist())) == 3 for col in o.T)
    with pytest.raises(ValueError, match="permutation"):
        lw.check_orders(np.array([[0, 0, 1]]), 3)


# ---- the readout on scripted label logits ---------------------------------------------------------------------


def _logits(quality, bias, orders, level=None):
    """label_logits[r, pos] = quality[order_r[pos]] + bias[pos] + level[r] (a scripted judge)."""
    q, b = np.asarray(quality, np.float64), np.asarray(bias, np.float64)
    out = q[np.asarray(orders)] + b[None, :]
    if level is not None:
        out = out + np.asarray(level)[:, None]
    return out.astype(np.float32)


def test_latin_square_cancels_a_planted_position_bias_exactly():
    g = 5
    quality = np.array([0.3, -1.0, 2.0, 0.0, 0.9])
    bias = np.array([4.0, 1.5, 0.0, -0.5, 2.5])  # larger than the quality differences
    orders = lw.presentation_orders(g, g, seed=7)
    s = np.asarray(lw.response_logits(_logits(quality, bias, orders, level=[0, 3, -2, 9, 1]), orders))
    np.testing.assert_allclose(s - s.mean(), quality - quality.mean(), atol=1e-5)
    assert list(np.argsort(-s)) == list(np.argsort(-quality))
    # a single presentation keeps the bias: the readout is quality + bias of the position each response had
    one = orders[:1]
    s1 = np.asarray(lw.response_logits(_logits(quality, bias, one), one))
    pos_of = np.argsort(one[0])
    np.testing.assert_allclose(s1 - s1.mean(), (quality + bias[pos_of]) - (quality + bias[pos_of]).mean(), atol=1e-5)
    assert np.abs((s1 - s1.mean()) - (quality - quality.mean())).max() > 0.5


@pytest.mark.slow
def test_scores_recover_ranking_average_half_and_are_complementary():
    g, c = 6, 3
    rng = np.random.default_rng(0)
    quality = rng.normal(size=(g, c))
    bias = rng.normal(size=(g,)) * 3
    orders = lw.presentation_orders(g, g, seed=1)
    lg = np.stack([_logits(quality[:, j], bias, orders) for j in range(c)], -1)  # (K, G, C)
    for mode in ("logit", "sign", "hard"):
        w, s = lw.listwise_scores(lg, orders, mode=mode)
        w = np.asarray(w)
        assert w.shape == (g, c)
        np.testing.assert_allclose(w.mean(0), 0.5, atol=1e-6)
        assert np.all((w >= 0) & (w <= 1))
    w, s = lw.listwise_scores(lg, orders, mode="logit")
    for j in range(c):  # win rates order the responses as their planted quality does
        assert list(np.argsort(-np.asarray(w)[:, j])) == list(np.argsort(-quality[:, j]))
    ws, _ = lw.listwise_scores(lg, orders, mode="sign")  # a full ranking: Borda counts k/(G-1)
    np.testing.assert_allclose(np.sort(np.asarray(ws), axis=0), np.tile(np.arange(g)[:, None] / (g - 1), (1, c)),
                               atol=1e-6)
    p = np.asarray(lw.listwise_preferences(jnp.asarray(s)))
    assert p.shape == (g, g, c)
    assert np.all(p + np.swapaxes(p, 0, 1) == 1.0)  # bit for bit
    np.testing.assert_array_equal(p[np.arange(g), np.arange(g)], 0.5)
    i, j = 0, 3
    np.testing.assert_allclose(p[i, j, 0], 1 / (1 + np.exp(-(s[i, 0] - s[j, 0]))), rtol=1e-5)


def test_unreadable_presentations_are_left_out():
    g = 3
    quality, bias = np.array([1.0, 0.0, -1.0]), np.zeros(3)
    orders = lw.presentation_orders(g, g, seed=0)
    lg = _logits(quality, bias, orders)
    lg[1] = np.nan
    s = np.asarray(lw.response_logits(lg, orders, valid_k=np.array([1.0, 0.0, 1.0])))
    np.testing.assert_allclose(s - s.mean(), quality - quality.mean(), atol=1e-5)
    none = np.asarray(lw.response_logits(lg, orders, valid_k=np.zeros(3)))
    np.testing.assert_array_equal(none, 0.0)
    np.testing.assert_allclose(np.asarray(lw.listwise_win_rates(none)), 0.5)


def test_position_bias_metric_sees_only_the_position():
    g = 4
    orders = lw.presentation_orders(g, g, seed=0)
    flat = np.asarray(lw.listwise_position_bias(_logits(np.arange(g) * 1.0, np.zeros(g), orders)))
    np.testing.assert_allclose(flat, 0.0, atol=1e-6)  # quality differences average out over a Latin square
    first = np.asarray(lw.listwise_position_bias(_logits(np.zeros(g), [2.0, 0, 0, 0], orders)))
    assert first[0] > 0.4 and np.all(first[1:] < 0)


# ---- the engine path on the tiny random Qwen3 ------------------------------------------------------------------

PROMPT = "Write one sentence about a lighthouse keeper at night."
RESPONSES = ["The keeper lit the lamp and watched the fog roll in.",
             "Lighthouse.",
             "At night the keeper wound the clockwork and read old letters by the beam."]
CRITERIA = [Criterion(id="vivid", name="Vivid", check="Is the sentence vivid and concrete?"),
            Criterion(id="complete", name="Complete", check="Is it a complete sentence about the keeper?")]


@pytest.fixture(scope="module")
def judge(tiny_qwen3_model, qwen_tokenizer):
    # cached: the later calls here reuse these verdicts instead of compiling more shapes (the file stays fast)
    return Judge(tiny_qwen3_model, qwen_tokenizer)


@pytest.mark.slow  # 19 s in the fast tier's last run (the judge's programs and a plain forward per sequence)
def test_label_logits_equal_a_plain_forward_of_each_sequence(judge, tiny_qwen3_model):
    (res,) = listwise_batch(judge, [PROMPT], [RESPONSES], CRITERIA, mode="logit")
    g, k, c = len(RESPONSES), len(res.orders), len(CRITERIA)
    assert res.scores.shape == (g, c) and res.strength.shape == (g, c) and res.label_probs.shape == (k, g, c)
    assert lw.is_latin(res.orders) and res.valid.all()
    np.testing.assert_allclose(res.scores.mean(0), 0.5, atol=1e-6)
    np.testing.assert_allclose(np.nansum(res.label_probs, axis=1), 1.0, atol=1e-5)
    lp = ListwisePrompts(judge)
    cfg = judge.config.prompt
    p_ids = judge.prompts.cut(PROMPT, cfg.max_prompt_tokens)[0]
    r_ids = [judge.prompts.cut(r, cfg.max_response_tokens)[0] for r in RESPONSES]
    ids = lp.label_ids(g)
    seqs, where = [], []
    for r, row in enumerate(res.orders):
        head = lp.head(p_ids, [r_ids[i] for i in row])
        for ci, cr in enumerate(CRITERIA):
            seqs.append(head + lp.suffix(cr, g))
            where.append((r, ci))
    logits = last_token_logits(tiny_qwen3_model, seqs)
    for i, (r, ci) in enumerate(where):
        want = logits[i, ids]
        np.testing.assert_allclose(res.label_logits[r, :, ci], want, atol=1e-4)


@pytest.mark.slow
def test_batch_shapes_orders_and_bad_calls(judge):
    two = ["A short answer.", "Another, somewhat longer answer about the keeper."]
    res = listwise_batch(judge, [PROMPT, PROMPT, PROMPT], [RESPONSES, two, ["only one"]], CRITERIA,
                         mode="sign")
    assert [r.scores.shape for r in res] == [(3, 2), (2, 2), (1, 2)]
    for r in res:
        np.testing.assert_allclose(r.scores.mean(0), 0.5, atol=1e-6)
    assert np.all(res[2].scores == 0.5)
    # group ids, not batch position, fix a group's default orders (served from the cache: no new compilation)
    hits = judge.stats.cache_hits
    (alone,) = listwise_batch(judge, [PROMPT], [two], CRITERIA, group_ids=[1], mode="sign")
    np.testing.assert_array_equal(alone.orders, res[1].orders)
    np.testing.assert_array_equal(alone.scores, res[1].scores)
    assert judge.stats.cache_hits == hits + 2 * len(CRITERIA)
    given = res[0].orders[1:2]  # one presentation: it keeps whatever position bias the judge has
    (one,) = listwise_batch(judge, [PROMPT], [RESPONSES], CRITERIA, orders=given, mode="logit")
    np.testing.assert_array_equal(one.orders, given)
    np.testing.assert_allclose(one.label_logits[0], res[0].label_logits[1], atol=1e-6)
    assert one.metrics["latin"] == 0.0
    with pytest.raises(ValueError, match="at most 26"):
        listwise_batch(judge, [PROMPT], [[f"r{i}" for i in range(27)]], CRITERIA[:1])
    with pytest.raises(ValueError, match="permutation"):
        listwise_batch(judge, [PROMPT], [RESPONSES], CRITERIA[:1], orders=np.array([[0, 0, 1]]))


@pytest.mark.slow
def test_the_listwise_comparison_of_a_judge_is_listwise_batch(judge, tiny_qwen3_model, qwen_tokenizer):
    """comparison="listwise" (the trainer's judge.comparison) hands pairwise_batch calls to listwise_batch: the
    same orders and scores, from the cache (no new verdicts). "listwise" is a comparison, never a pairing."""
    (want,) = listwise_batch(judge, [PROMPT], [RESPONSES], CRITERIA, mode="sign", group_ids=[4], seed=2)
    made = judge.stats.judgments
    (got,) = judge.pairwise_batch([PROMPT], [RESPONSES], CRITERIA, mode="sign", comparison="listwise", group_ids=[4],
                                  seed=2)
    assert judge.stats.judgments == made
    np.testing.assert_array_equal(got.orders, want.orders)
    np.testing.assert_array_equal(got.win_rates, want.scores)
    assert "top_agreement" in got.metrics
    configured = Judge(tiny_qwen3_model, qwen_tokenizer, JudgeConfig(comparison="listwise", mode="sign"))
    (other,) = configured.pairwise_batch([PROMPT], [RESPONSES], CRITERIA, group_ids=[4], seed=2)
    np.testing.assert_allclose(other.win_rates, want.scores, atol=1e-6)
    with pytest.raises(ValueError, match="pairing: unknown 'ranked'"):
        JudgeConfig(pairing="ranked")
    with pytest.raises(ValueError, match="pairing: unknown"):
        judge.pairwise_batch([PROMPT], [RESPONSES], CRITERIA, pairing="ranked")
    for call in (lambda: JudgeConfig(pairing="listwise"),
                 lambda: judge.pairwise_batch([PROMPT], [RESPONSES], CRITERIA, pairing="listwise")):
        with pytest.raises(ValueError, match="'listwise' is a comparison, not a pairing.*comparison='listwise'"):
            call()
    with pytest.raises(ValueError, match="comparison: unknown 'ranked'"):
        judge.pairwise_batch([PROMPT], [RESPONSES], CRITERIA, comparison="ranked")


@pytest.mark.slow
def test_the_list_ceiling_shape_fits_the_longest_group_the_budgets_allow(tiny_qwen3_model, qwen_tokenizer):
    """With a budget of two compiled shapes, the second is the ceiling. It is planned from the longest listwise
    head (G responses at the token budget, not the pointwise head of one), so a later group of maximal
    responses fits it and nothing more is compiled."""
    cfg = JudgeConfig(prompt=PromptConfig(max_prompt_tokens=24, max_response_tokens=40), max_shapes=2, mode="logit")
    j = Judge(tiny_qwen3_model, qwen_tokenizer, cfg)
    j.reserve(CRITERIA)
    words = lambda n, w: " ".join([w] * n)
    for n in (2, 6, 60):  # the last is cut to 40 tokens per response
        listwise_batch(j, [PROMPT], [[words(n, w) for w in ("red", "blue", "green")]], CRITERIA)
    (shapes,) = [v for k, v in j._shapes.items() if k[1] == "list3"]
    assert len(shapes) == 2, shapes
    assert j.stats.truncations > 0


@pytest.mark.parametrize("which", ["qwen_tokenizer", pytest.param("smollm2_tokenizer", marks=[pytest.mark.smollm2, pytest.mark.slow])])
def test_labels_are_single_tokens_and_the_prompt_reads_in_order(which, request):
    from types import SimpleNamespace

    from rubric_jax.judge.prompts import PromptBuilder

    tok = request.getfixturevalue(which)
    lp = ListwisePrompts(SimpleNamespace(prompts=PromptBuilder(tok), tokenizer=tok))
    assert len(set(lp.label_ids(26))) == 26
    seq = lp.head(tok.encode(PROMPT), [tok.encode(r) for r in RESPONSES[::-1]]) + lp.suffix(CRITERIA[0], 3)
    text = tok.decode(list(seq))
    at = [text.index(f"### Response {x}\n{r}") for x, r in zip("ABC", RESPONSES[::-1])]
    assert at == sorted(at) and text.index(PROMPT) < at[0]
    assert text.rstrip().endswith("The best response is Response") and "A, B or C?" in text
