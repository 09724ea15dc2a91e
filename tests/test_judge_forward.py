"""The judge scores through the model's own forward: prefix-tree scoring equals full sequences for Qwen3
and Llama, in f32 and bf16, split over several calls and on a 2x4 mesh; a bounded number of compiled
shapes; no stale weights; no attention arithmetic inside rubric_jax/judge."""

import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from conftest import write_tiny_checkpoint
from rubric_jax import load_model
from rubric_jax.judge import Judge
from rubric_jax.rubrics import Criterion

PROMPT = "Describe a quiet harbour at dawn in two sentences."
RESPONSES = [
    "Mist sits on the water and the boats knock softly against the pier.",
    "The harbour is quiet. It is dawn.",
    "Gulls wheel above nets still wet from the night, and a bell rings once.",
    "Boats.",
]
CRITERIA = [
    Criterion(id="imagery", name="Imagery", check="The text uses concrete sensory details."),
    Criterion(id="brevity", name="Brevity", check="The text keeps to two sentences.", max_points=2,
              levels=("No.", "Nearly.", "Yes.")),
    Criterion(id="calm", name="Calm tone", check="The text conveys stillness."),
]


def _tree_vs_full(model, tok, **cfg):
    tree = Judge(model, tok, **cfg).pairwise(PROMPT, RESPONSES, CRITERIA)
    full = Judge(model, tok, sharing="none", **cfg).pairwise(PROMPT, RESPONSES, CRITERIA)
    pt = Judge(model, tok, **cfg).pointwise(PROMPT, RESPONSES, CRITERIA)
    pf = Judge(model, tok, sharing="none", **cfg).pointwise(PROMPT, RESPONSES, CRITERIA)
    off = ~np.eye(len(RESPONSES), dtype=bool)
    return (np.abs(tree.p_first[off] - full.p_first[off]).max(), np.abs(pt.scores - pf.scores).max(),
            tree, full)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("tiny_llama_judge"))
    write_tiny_checkpoint(d, "llama", tied=False, seed=4)
    return d


@pytest.mark.slow
def test_qwen3_tree_equals_full_sequences(tiny_qwen3_model, qwen_tokenizer):
    d_pair, d_point, tree, _ = _tree_vs_full(tiny_qwen3_model, qwen_tokenizer)
    assert d_pair <= 1e-4 and d_point <= 1e-4
    assert np.nanstd(tree.p_first) > 1e-3  # verdicts differ across pairs: the comparison means something


@pytest.mark.slow
def test_llama_tree_equals_full_sequences(tiny_llama, qwen_tokenizer):
    d_pair, d_point, _, _ = _tree_vs_full(load_model(tiny_llama), qwen_tokenizer)
    assert d_pair <= 1e-4 and d_point <= 1e-4


@pytest.mark.slow
def test_bf16_tree_close_to_full_sequences(tiny_qwen3, qwen_tokenizer):
    """bf16 weights and activations: the two layouts round differently (different matmul shapes and
    softmax splits), so the stated bound is 2e-2 on probabilities; in f32 the same check holds to 1e-4."""
    d_pair, d_point, _, _ = _tree_vs_full(load_model(tiny_qwen3[0], dtype=jnp.bfloat16), qwen_tokenizer)
    assert d_pair <= 2e-2 and d_point <= 2e-2 * 2  # pointwise scores are expectations over 0..2


@pytest.mark.slow
def test_split_over_several_calls_equals_one_call(tiny_qwen3_model, qwen_tokenizer):
    one = Judge(tiny_qwen3_model, qwen_tokenizer, max_shapes=8)
    many = Judge(tiny_qwen3_model, qwen_tokenizer, tokens_per_call=1024, max_shapes=8)  # a few heads per call
    a = one.pairwise(PROMPT, RESPONSES, CRITERIA)
    b = many.pairwise(PROMPT, RESPONSES, CRITERIA)
    assert many.stats.model_calls > one.stats.model_calls
    np.testing.assert_allclose(b.p_first, a.p_first, atol=1e-5)


@pytest.mark.slow
def test_compiled_shapes_stay_within_the_budget(tiny_qwen3_model, qwen_tokenizer):
    judge = Judge(tiny_qwen3_model, qwen_tokenizer, max_shapes=4)
    rng = np.random.RandomState(0)
    words = "sea mist boat rope gull bell tide pier light stone wind dawn".split()
    for step in range(8):
        n = [int(rng.randint(1, 40)) for _ in RESPONSES]
        responses = [" ".join(rng.choice(words, k)) for k in n]
        judge.pairwise(PROMPT + " " * step, responses, CRITERIA[: 1 + step % 3])
    tree_shapes = [s for s in judge.stats.shapes if s[0] == "tree"]
    assert 1 < len(tree_shapes) <= 4  # varying lengths did need new shapes, and the budget held


@pytest.mark.slow
def test_judge_reads_current_weights(tiny_qwen3, qwen_tokenizer):
    model = load_model(tiny_qwen3[0])
    judge = Judge(model, qwen_tokenizer)
    before = judge.pairwise(PROMPT, RESPONSES, CRITERIA).p_first
    emb = model.embed_tokens.embedding
    emb.set_value(emb.get_value() * 1.5)
    after = judge.pairwise(PROMPT + ".", RESPONSES, CRITERIA).p_first  # new prompt: no cache hit
    fresh = Judge(model, qwen_tokenizer).pairwise(PROMPT + ".", RESPONSES, CRITERIA).p_first
    np.testing.assert_allclose(after, fresh, atol=1e-6)
    assert np.nanmax(np.abs(after - before)) > 1e-4


def test_no_attention_math_in_the_judge():
    root = os.path.join(os.path.dirname(__file__), "..", "rubric_jax", "judge")
    pattern = re.compile(r"einsum|apply_rope|_MASK_VALUE|softmax\(|rope_inv_freq|dot_product_attention")
    offending = []
    for name in sorted(os.listdir(root)):
        if name.endswith(".py"):
            for i, line in enumerate(open(os.path.join(root, name)), 1):
                code = line.split("#")[0]
                if pattern.search(code):
                    offending.append(f"{name}:{i}: {line.strip()}")
    assert not offending, offending


@pytest.mark.slow
def test_judge_on_a_mesh_equals_single_device(tiny_qwen3, tmp_path_factory):
    from test_sharding import mesh_check  # one 8-device subprocess for every mesh check of the session

    res = mesh_check(tmp_path_factory, "judge_mesh_check", tiny_qwen3[0])
    assert res["devices"] == 8 and res["max_diff"] <= 1e-4
    assert res["sharded_params"] > 0
