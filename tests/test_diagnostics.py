"""Text diagnostics (rubric_jax.rl.diagnostics) against counts made by hand, and the judge's health metrics."""

import json
import math

import numpy as np
import pytest

from rubric_jax.rl import diagnostics as D
from rubric_jax.rl.hosts import merge_rows
from rubric_jax.methods.rcrl.reward import health_metrics
from rubric_jax.sampling.sampler import SampleOutput


class CharTokenizer:
    """One token per character (id = code point), 0 = end of sequence: token counts are character counts."""

    eos_ids = (0,)

    def encode(self, text):
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(chr(i) for i in ids if i not in self.eos_ids)


# "the cat the cat sat": 5 words, 3 distinct; bigrams the-cat, cat-the, the-cat, cat-sat (4, 3 distinct);
# trigrams the-cat-the, cat-the-cat, the-cat-sat (3, all distinct).
CAT = "the cat the cat sat"


def test_words_lowercase_and_split_on_non_alphanumerics():
    assert D.words("Don't stop_now! 3 CATS,dogs") == ["don", "t", "stop", "now", "3", "cats", "dogs"]
    assert D.words("Il était 二十年 là") == ["il", "était", "二十年", "là"]
    assert D.words("") == [] and D.words(" -- ... ") == []


def test_ngrams_by_hand():
    assert D.ngrams(["a", "b", "c"], 2) == [("a", "b"), ("b", "c")]
    assert D.ngrams(["a", "b", "c"], 3) == [("a", "b", "c")]
    assert D.ngrams(["a", "b"], 3) == []
    with pytest.raises(ValueError):
        D.ngrams(["a"], 0)


def test_distinct_n_by_hand():
    assert D.distinct_n([CAT], 1) == pytest.approx(3 / 5)
    assert D.distinct_n([CAT], 2) == pytest.approx(3 / 4)
    assert D.distinct_n([CAT], 3) == 1.0
    # pooled over the set: the-cat, cat-sat, the-cat, cat-ran -> 3 distinct of 4
    assert D.distinct_n(["the cat sat", "the cat ran"], 2) == pytest.approx(3 / 4)
    # no n-gram spans two texts: a-b, a-b (no b-a) -> 1 of 2
    assert D.distinct_n(["a b", "a b"], 2) == pytest.approx(1 / 2)
    # punctuation and case do not make n-grams distinct
    assert D.distinct_n(["The cat.", "the CAT!"], 2) == pytest.approx(1 / 2)


def test_distinct_n_edge_cases():
    assert D.distinct_n([""], 1) == 0.0
    assert D.distinct_n([], 2) == 0.0
    assert D.distinct_n(["one two"], 3) == 0.0  # n longer than the text: no n-gram at all
    assert D.distinct_n(["one two", "x y z"], 3) == 1.0  # only the long text counts
    with pytest.raises(TypeError):
        D.distinct_n("a lone string", 1)


def test_ngram_repetition_by_hand():
    rows = D.ngram_repetition_rows([CAT, "the cat the cat the cat"], 2)
    # CAT: 1 - 3/4; the second: 5 bigrams the-cat, cat-the, the-cat, cat-the, the-cat, 2 distinct -> 1 - 2/5
    np.testing.assert_allclose(rows, [1 / 4, 3 / 5])
    assert D.ngram_repetition([CAT, "the cat the cat the cat"], 2) == pytest.approx((1 / 4 + 3 / 5) / 2)
    assert D.ngram_repetition([CAT], 1) == pytest.approx(2 / 5)
    assert D.ngram_repetition([CAT], 3) == 0.0
    assert D.ngram_repetition(["the cat the cat"], 2) == pytest.approx(1 / 3)


def test_ngram_repetition_skips_texts_without_ngrams():
    rows = D.ngram_repetition_rows(["", "x", "a a a a"], 2)
    assert np.isnan(rows[0]) and np.isnan(rows[1]) and rows[2] == pytest.approx(2 / 3)
    # the short texts are left out of the mean, not counted as 0 (which would give 2/9)
    assert D.ngram_repetition(["", "x", "a a a a"], 2) == pytest.approx(2 / 3)
    assert D.ngram_repetition(["", "one two"], 3) == 0.0
    assert D.ngram_repetition([], 3) == 0.0


def test_overused_ngrams_by_hand():
    texts, prompts = ["red red blue", "red green", "blue blue"], ["p", "q", "q"]
    # unigram counts: red 3 (p, q), blue 3 (p, q), green 1 (q); 7 occurrences in all
    assert D.overused_ngrams(texts, prompts, n=1, top_k=1, min_count=1) == pytest.approx(100 * 3 / 7)
    assert D.overused_ngrams(texts, prompts, n=1, top_k=2, min_count=1) == pytest.approx(100 * 6 / 7)
    assert D.overused_ngrams(texts, prompts, n=1, top_k=5, min_count=0) == pytest.approx(100 * 6 / 7)  # green: 1 prompt
    assert D.overused_ngrams(texts, prompts, n=1, top_k=2, min_count=3) == 0.0  # none occurs more than 3 times
    assert D.overused_ngrams(texts, prompts, n=1, top_k=2, min_count=1, min_prompts=3) == 0.0


def test_overused_ngrams_counts_prompts_not_texts():
    texts = ["zed zed zed", "zed"]
    assert D.overused_ngrams(texts, ["p", "p"], n=1, min_count=1) == 0.0  # one prompt's topic
    assert D.overused_ngrams(texts, None, n=1, min_count=1) == 100.0  # each text its own prompt
    assert D.overused_ngrams(["a b", ""], None, n=3) == 0.0
    with pytest.raises(ValueError):
        D.overused_ngrams(texts, ["p"])


def test_foreign_token_rate_on_mixed_latin_and_cjk():
    pieces = ["Clara", " had", " covered", " 二十", "年", "—lost"]
    assert D.foreign_token_rate("Write a story about a reporter.", pieces) == pytest.approx(2 / 6)
    assert D.foreign_token_rate("", pieces) == pytest.approx(2 / 6)  # no prompt: Latin allowed
    assert D.foreign_token_rate("写一个故事", ["二十", "年"]) == 0.0
    assert D.foreign_token_rate("写一个故事", ["二十", " story"]) == pytest.approx(1 / 2)
    assert D.foreign_token_rate("Write.", ["—", "123", " "]) == 0.0  # no letters, nothing foreign
    assert D.foreign_token_rate("Write.", []) == 0.0


# Groups p: "the cat the cat the cat" (6 words) + "a dog a dog" (4); q: "二十年 the end" (3).
#   distinct-1: p 4 distinct of 10, q 3 of 3 -> (0.4 + 1) / 2
#   distinct-2: p: 5 bigrams (2 distinct) + a-dog, dog-a, a-dog -> 4 of 8; q 2 of 2 -> (0.5 + 1) / 2
#   distinct-3: p: 4 trigrams (2 distinct) + a-dog-a, dog-a-dog -> 4 of 6; q 1 of 1 -> (2/3 + 1) / 2
#   rep_3: 1 - 2/4, 0, 0 -> 1/6; words 6, 4, 3; foreign words 0, 0, 1/3 -> 1/9
TEXTS = ["the cat the cat the cat", "a dog a dog", "二十年 the end"]
PROMPTS = ["p", "p", "q"]


def test_text_diagnostics_by_hand():
    m = D.text_diagnostics(TEXTS, PROMPTS)
    assert m["diversity/distinct_1"] == pytest.approx(0.7)
    assert m["diversity/distinct_2"] == pytest.approx(0.75)
    assert m["diversity/distinct_3"] == pytest.approx(5 / 6)
    assert m["repetition/ngram_3"] == pytest.approx(1 / 6)
    assert m["completion_words/mean"] == pytest.approx(13 / 3) and m["completion_words/median"] == 4.0
    assert m["foreign_script_word_rate"] == pytest.approx(1 / 9)
    assert m["empty_completions"] == 0.0 and m["repetition/overused_3"] == 0.0
    assert "completion_len/mean" not in m and "foreign_script_rate" not in m  # tokens need a tokenizer


def test_text_diagnostics_with_a_tokenizer():
    m = D.text_diagnostics(TEXTS, PROMPTS, tokenizer=CharTokenizer())
    # 23, 11 and 11 characters; the CJK text's 3 ideographs of its 11 tokens are foreign
    assert m["completion_len/mean"] == pytest.approx(15.0) and m["completion_len/median"] == 11.0
    assert m["foreign_script_rate"] == pytest.approx((3 / 11) / 3)


def test_text_diagnostics_groups_by_prompt():
    texts = ["a b", "a b"]
    # one prompt: distinct-2 of both together, 1 of 2; two prompts: each text alone, 1 of 1
    assert D.text_diagnostics(texts, ["p", "p"])["diversity/distinct_2"] == pytest.approx(0.5)
    assert D.text_diagnostics(texts)["diversity/distinct_2"] == pytest.approx(0.5)
    assert D.text_diagnostics(texts, ["p", "q"])["diversity/distinct_2"] == 1.0
    # groups of different sizes weigh the same: (1/2 + 1) / 2, not (1/2 + 1/2 + 1) / 3
    assert D.text_diagnostics(["a b", "a b", "c d"], ["p", "p", "q"])["diversity/distinct_2"] == pytest.approx(0.75)


def test_text_diagnostics_edge_cases():
    m = D.text_diagnostics(["", "a a"])
    assert m["empty_completions"] == 0.5 and m["completion_words/mean"] == 1.0
    assert m["diversity/distinct_1"] == pytest.approx(0.5) and m["repetition/ngram_3"] == 0.0
    assert all(math.isfinite(v) for v in m.values())
    with pytest.raises(ValueError):
        D.text_diagnostics([])
    with pytest.raises(ValueError):
        D.text_diagnostics(["a", "b"], ["p"])


def test_rollout_text_rows_and_metrics_by_hand():
    rows = D.rollout_text_rows([["the cat the cat"], [""], ["a b c a b c", "a b c"]])
    np.testing.assert_allclose(rows["distinct_1"], [0.5, np.nan, 3 / 9, 3 / 9])
    np.testing.assert_allclose(rows["group_weight"], [1, 1, 0.5, 0.5])
    np.testing.assert_allclose(rows["rep_3"], [0.0, np.nan, 1 / 4, 0.0])
    assert rows["words"].tolist() == [4, 0, 6, 3]
    m = D.rollout_text_metrics(rows)
    # the empty group holds no n-gram and is left out: (1/2 + 1/3) / 2
    assert m["diversity/distinct_1"] == pytest.approx((1 / 2 + 1 / 3) / 2)
    # bigrams: the-cat, cat-the, the-cat (2 of 3); a-b, b-c, c-a, a-b, b-c + a-b, b-c (3 of 7)
    assert m["diversity/distinct_2"] == pytest.approx((2 / 3 + 3 / 7) / 2)
    assert m["repetition/ngram_3"] == pytest.approx((0 + 1 / 4 + 0) / 3)
    assert m["completion_words/mean"] == pytest.approx(13 / 4)


def test_rollout_text_rows_pool_across_processes():
    groups = [["the cat the cat", "a dog"], ["x y z x y z", ""], ["one", "two three four two three four"]]
    whole = D.rollout_text_rows(groups)
    pooled = merge_rows([D.rollout_text_rows(groups[:1]), D.rollout_text_rows(groups[1:])])
    assert D.rollout_text_metrics(pooled) == D.rollout_text_metrics(whole)
    for k in D.TEXT_ROW_KEYS:
        assert len(whole[k]) == 6
    assert D.rollout_text_metrics(D.rollout_text_rows([[""]])) == {
        "diversity/distinct_1": 0.0, "diversity/distinct_2": 0.0, "diversity/distinct_3": 0.0,
        "repetition/ngram_3": 0.0, "completion_words/mean": 0.0}


def _sample_output(texts, g, eos_at=()):
    tok = CharTokenizer()
    width = max(len(t) for t in texts) + 1
    tokens = np.zeros((len(texts), width), np.int32)
    lengths = np.zeros(len(texts), np.int32)
    for i, t in enumerate(texts):
        ids = tok.encode(t) + ([0] if i in eos_at else [])
        tokens[i, :len(ids)] = ids
        lengths[i] = len(ids)
    entropy = np.ones((len(texts), width), np.float32)
    b = len(texts) // g
    return SampleOutput(tokens=tokens, lengths=lengths, logprobs=entropy * 0, entropy=entropy,
                        prompt_tokens=np.ones((b, 2), np.int32), prompt_mask=np.ones((b, 2), bool), num_samples=g)


def test_completion_rows_carry_the_text_rows_and_metrics_log_them():
    texts = ["the cat the cat", "the cat sat", "二十年 ok", "ok ok ok ok"]
    out, tok = _sample_output(texts, 2, eos_at=(0,)), CharTokenizer()
    rows = D.completion_rows(out, ["Write.", "Write."], texts, tok)
    m = D.completion_metrics(rows)
    # groups (texts 0, 1) and (2, 3): distinct-1 3 of 7 and 2 of 6
    assert m["diversity/distinct_1"] == pytest.approx((3 / 7 + 2 / 6) / 2)
    assert m["repetition/ngram_3"] == pytest.approx((0 + 0 + 1 / 2) / 3)
    assert m["completion_truncated"] == 0.75 and m["foreign_script_rate"] == pytest.approx((3 / 6) / 4)
    # each process' rows pool into the whole batch's metrics
    halves = [D.completion_rows(_sample_output(texts[i:i + 2], 2, eos_at=(0,) if i == 0 else ()), ["Write."],
                                texts[i:i + 2], tok) for i in (0, 2)]
    assert D.completion_metrics(merge_rows(halves)) == m
    # rows from before the text rows existed still give the old metrics
    old = {k: v for k, v in rows.items() if k not in D.TEXT_ROW_KEYS}
    assert set(D.completion_metrics(old)) == {
        "completion_len/mean", "completion_len/max", "completion_len/min", "completion_truncated",
        "policy_entropy", "foreign_script_rate", "empty_completions"}


def test_trainer_and_evals_use_the_same_names():
    texts, prompts = ["the cat the cat sat", "a dog ran", "the end", "two words"], ["p", "p", "q", "q"]
    train = D.completion_metrics(D.completion_rows(_sample_output(texts, 2), prompts[::2], texts, CharTokenizer()))
    evals = D.text_diagnostics(texts, prompts)
    shared = [k for k in evals if k.startswith(("diversity/", "repetition/ngram"))] + ["completion_words/mean"]
    assert len(shared) == 5
    assert {k: train[k] for k in shared} == pytest.approx({k: evals[k] for k in shared})


def test_entropy_ratio():
    assert D.entropy_ratio(0.5, 2.0) == 0.25
    assert D.entropy_ratio(2.0, 2.0) == 1.0
    for bad in (0.0, -1.0, None, float("nan"), float("inf")):
        assert math.isnan(D.entropy_ratio(1.0, bad))


def test_initial_entropy_from_the_first_steps():
    history = [{"step": 2, "policy_entropy": 6.0}, {"step": 0, "policy_entropy": 2.0, "loss": 1.0},
               {"step": 1, "policy_entropy": 4.0}, {"step": 3, "policy_entropy": 100.0}]
    assert D.initial_entropy(history, first_steps=2) == pytest.approx(3.0)  # steps 0 and 1, not file order
    assert D.initial_entropy(history, first_steps=3) == pytest.approx(4.0)
    assert D.initial_entropy(history, first_steps=5) is None  # not enough steps yet
    assert D.initial_entropy([], first_steps=1) is None
    # a step logged twice keeps its last value; rows without a finite entropy are skipped
    rerun = [{"step": 0, "policy_entropy": 9.0}, {"step": 0, "policy_entropy": 2.0}, {"step": 1, "loss": 0.3},
             {"step": 1, "policy_entropy": float("nan")}, {"step": 2, "policy_entropy": 4.0}]
    assert D.initial_entropy(rerun, first_steps=2) == pytest.approx(3.0)
    assert D.initial_entropy([{"step": 0, "entropy": 1.5}], first_steps=1, key="entropy") == 1.5


def test_record_entropy_fills_once_and_survives_json():
    head = []
    for step, h in enumerate([2.0, 4.0, 6.0, 8.0]):
        head = D.record_entropy(head, step, h, first_steps=3)
    assert head == [{"step": 0, "policy_entropy": 2.0}, {"step": 1, "policy_entropy": 4.0},
                    {"step": 2, "policy_entropy": 6.0}]  # step 3 came after the head was full
    assert D.initial_entropy(head, first_steps=3) == pytest.approx(4.0)
    # a checkpoint's meta is JSON; a resumed run computes the same H_0 from it
    restored = json.loads(json.dumps({"entropy_head": head}))["entropy_head"]
    assert D.initial_entropy(D.record_entropy(restored, 7, 1.0, first_steps=3), first_steps=3) == pytest.approx(4.0)
    # a step rerun after an interrupted save replaces its value instead of taking a second place
    partial = D.record_entropy([{"step": 0, "policy_entropy": 2.0}, {"step": 1, "policy_entropy": 4.0}], 1, 5.0,
                               first_steps=3)
    assert partial == [{"step": 0, "policy_entropy": 2.0}, {"step": 1, "policy_entropy": 5.0}]
    assert D.record_entropy(partial, 2, float("nan"), first_steps=3) == partial
    assert D.initial_entropy(partial, first_steps=3) is None


def test_health_metrics_average_each_figure_over_the_groups_reporting_it():
    health = [{"position_bias": 0.1, "invalid_fraction": 0.0, "order_agreement": 0.5, "judgments": 12.0},
              {"position_bias": 0.3, "invalid_fraction": 0.5, "verdict_entropy": 0.4, "order_agreement": 1.0},
              {"position_bias": 0.5}]
    m = health_metrics(health)
    assert m == pytest.approx({"judge/position_bias": 0.3, "judge/invalid_fraction": 0.25,
                               "judge/verdict_entropy": 0.4, "judge/order_agreement": 0.75})
    assert health_metrics([{"position_bias": 0.2}]) == pytest.approx({"judge/position_bias": 0.2})
    assert health_metrics([]) == {}


def test_collapse_signs_name_a_policy_turned_uniform_and_a_gradient_stuck_at_zero():
    from rubric_jax.rl.diagnostics import collapse_signs

    v = 49152
    ln_v = float(np.log(v))
    step = lambda h, g=0.5: {"policy_entropy": h, "grad_norm": g}
    assert collapse_signs([step(2.3), step(0.96 * ln_v)], v, 2.3)[0].startswith("policy entropy")
    assert "96% of ln(vocabulary size 49152)" in collapse_signs([step(0.96 * ln_v)], v, 2.3)[0]
    assert collapse_signs([step(0.94 * ln_v)], v, 2.3) == []  # high, not yet uniform
    assert collapse_signs([step(0.98 * ln_v)], v, 0.98 * ln_v) == []  # a random model starts uniform
    assert collapse_signs([step(0.98 * ln_v)], v, None) == []  # nothing to compare with yet
    stuck = [step(2.0, 0.0)] * 3
    assert collapse_signs(stuck, v, 2.0) == ["gradient norm exactly 0 in each of the last 3 steps: the weights "
                                             "do not move"]
    assert collapse_signs([step(2.0, 1e-9)] + stuck[:2], v, 2.0) == []  # two zero steps, one tiny but real
