"""The LLM constraint verifier: its verdicts equal a plain forward of each full sequence, both label orders
cancel a letter bias, a response's head is read once for all its constraints, hard mode and unreadable orders."""

import numpy as np
import pytest

from conftest import last_token_logits
from rubric_jax.judge import Judge
from rubric_jax.judge.verify import _result, verify_batch

PROMPT = "Write two sentences about a lighthouse keeper, in the past tense."
RESPONSES = ["The keeper climbed the stairs at dusk. Her lamp cut through the fog.",
             "A lighthouse stands by the sea and a man lives in it."]
CONSTRAINTS = ["The narration must be written in the past tense throughout.",
               "The response must not contain a single comma.",
               "Keep a quiet, lonely tone."]


@pytest.fixture(scope="module")
def judge(tiny_qwen3_model, qwen_tokenizer):
    return Judge(tiny_qwen3_model, qwen_tokenizer, cache_entries=0)


@pytest.mark.slow  # 30 s in the fast tier's last run: one compiled judge program per sequence shape
def test_verdicts_equal_a_plain_forward_of_each_sequence(judge, tiny_qwen3_model, qwen_tokenizer):
    """p_orders[a, k, o] = softmax over the two label tokens of the model's next-token logits after the full
    sequence head(a) + suffix(k, o), computed here by calling the model on that one sequence."""
    (res,) = verify_batch(judge, [PROMPT], [RESPONSES], [CONSTRAINTS])
    pb = judge.prompts
    ids = pb.label_ids
    p_ids = pb.cut(PROMPT, judge.config.prompt.max_prompt_tokens)[0]
    seqs, where = [], []
    for a, resp in enumerate(RESPONSES):
        head = pb.head("verify", p_ids, pb.cut(resp, judge.config.prompt.max_response_tokens)[0])
        for k, text in enumerate(CONSTRAINTS):
            for o in (0, 1):
                seqs.append(head + pb.verify_suffix(text, o))
                where.append((a, k, o))
    # one batch, right-padded: under the causal mask a sequence's last real position sees only its own tokens
    logits = last_token_logits(tiny_qwen3_model, seqs)
    for i, (a, k, o) in enumerate(where):
        lg = logits[i, ids]
        p_first = np.exp(lg[0] - np.logaddexp(lg[0], lg[1]))
        np.testing.assert_allclose(res.p_orders[a, k, o], p_first if o == 0 else 1.0 - p_first, atol=2e-5)
    np.testing.assert_allclose(res.p_pass, res.p_orders.mean(-1), atol=1e-6)
    # the same through the engine's full-sequence path
    (full,) = verify_batch(judge, [PROMPT], [RESPONSES], [CONSTRAINTS], sharing="none")
    np.testing.assert_allclose(full.p_orders, res.p_orders, atol=2e-5)


@pytest.mark.slow
def test_a_response_is_read_once_for_all_its_constraints(tiny_qwen3_model, qwen_tokenizer):
    """Adding constraints adds only their suffix tokens (both orders), not another copy of prompt + response."""
    def real_tokens(cs):
        j = Judge(tiny_qwen3_model, qwen_tokenizer, cache_entries=0)
        verify_batch(j, [PROMPT], [RESPONSES], [cs])
        return j.stats.real_tokens

    pb = Judge(tiny_qwen3_model, qwen_tokenizer).prompts
    extra = sum(len(pb.verify_suffix(t, o)) for t in CONSTRAINTS[1:] for o in (0, 1)) * len(RESPONSES)
    assert real_tokens(CONSTRAINTS) - real_tokens(CONSTRAINTS[:1]) == extra


def _vals(first, second, lse=None):
    """(G=1, K=1, 2 orders, 3) verdict rows from per-order label logits."""
    v = np.zeros((1, 1, 2, 3), np.float32)
    v[0, 0, :, 0], v[0, 0, :, 1] = first, second
    v[0, 0, :, 2] = np.logaddexp(first, second) if lse is None else lse
    return v


def test_both_orders_cancel_a_planted_letter_bias():
    # a judge that says the first letter with logit margin 2 whatever it means: P(first) = sigmoid(2) in both orders
    res = _result(_vals([2.0, 2.0], [0.0, 0.0]), "logit", 0.0)
    s = 1 / (1 + np.exp(-2.0))
    np.testing.assert_allclose(res.p_orders[0, 0], [s, 1 - s], rtol=1e-6)
    np.testing.assert_allclose(res.p_pass, [[0.5]], atol=1e-7)
    assert res.metrics["label_bias"] == pytest.approx(s - 0.5, rel=1e-6)
    assert res.metrics["order_agreement"] == 0.0
    # a judge that means "keeps it" in both orders: first letter in order 0, second in order 1
    res = _result(_vals([3.0, 0.0], [0.0, 1.0]), "logit", 0.0)
    want = 0.5 * (1 / (1 + np.exp(-3.0)) + 1 / (1 + np.exp(-1.0)))
    np.testing.assert_allclose(res.p_pass, [[want]], rtol=1e-6)
    assert res.passes[0, 0] and res.metrics["order_agreement"] == 1.0


def test_hard_mode_and_unreadable_orders():
    # hard: each order's argmax; orders that disagree give 1/2, which passes (a verifier that cannot tell)
    res = _result(_vals([2.0, 2.0], [0.0, 0.0]), "hard", 0.0)
    np.testing.assert_array_equal(res.p_orders[0, 0], [1.0, 0.0])
    assert res.p_pass[0, 0] == 0.5 and res.passes[0, 0]
    res = _result(_vals([0.0, 2.0], [2.0, 0.0]), "hard", 0.0)
    assert res.p_pass[0, 0] == 0.0 and not res.passes[0, 0]
    # order 0 holds little of the probability mass (lse far above the label logits): it is replaced by order 1
    res = _result(_vals([1.0, 0.0], [0.0, 3.0], lse=[10.0, 3.05]), "logit", 0.5)
    p1 = 1 / (1 + np.exp(-3.0))
    np.testing.assert_allclose(res.p_pass, [[p1]], rtol=1e-6)
    assert res.valid[0, 0] and np.isnan(res.p_orders[0, 0, 0])
    # both unreadable: 1/2, invalid
    res = _result(_vals([1.0, 0.0], [0.0, 1.0], lse=[10.0, 10.0]), "logit", 0.5)
    assert res.p_pass[0, 0] == 0.5 and not res.valid[0, 0] and res.metrics["invalid_fraction"] == 1.0


def test_bad_calls(judge):
    with pytest.raises(ValueError, match="mode must be"):
        verify_batch(judge, [PROMPT], [RESPONSES], [CONSTRAINTS], mode="generate")
    with pytest.raises(ValueError, match="one of each per prompt"):
        verify_batch(judge, [PROMPT], [RESPONSES], [CONSTRAINTS, CONSTRAINTS])
    with pytest.raises(ValueError, match="empty constraint"):
        verify_batch(judge, [PROMPT], [RESPONSES], [["  "]])
    (none,) = verify_batch(judge, [PROMPT], [RESPONSES], [[]])
    assert none.p_pass.shape == (2, 0)
