"""Sampler: logit filters on hand-made logits, EOS handling, determinism, cache vs recompute, prompts as a
shared prefix vs a repeated cache."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rubric_jax.models.transformer import KVCache
from rubric_jax.sampling import filter_logits, left_pad, prefill, sample, sample_from_logits
from rubric_jax.sampling.filters import logprob_and_entropy, min_p_filter, top_k_filter, top_p_filter

LOGITS = np.log(np.array([[0.5, 0.25, 0.15, 0.07, 0.03]], np.float32))


def kept(x):
    return np.isfinite(np.asarray(x))[0].tolist()


def test_top_k():
    assert kept(top_k_filter(jnp.asarray(LOGITS), 2)) == [True, True, False, False, False]
    assert kept(top_k_filter(jnp.asarray(LOGITS), 0)) == [True] * 5


def test_top_p():
    # Mass before each token: 0, .5, .75, .9, .97 -> p=0.8 keeps the first three.
    assert kept(top_p_filter(jnp.asarray(LOGITS), 0.8)) == [True, True, True, False, False]
    assert kept(top_p_filter(jnp.asarray(LOGITS), 0.5)) == [True, False, False, False, False]
    assert kept(top_p_filter(jnp.asarray(LOGITS), 0.51)) == [True, True, False, False, False]
    assert kept(top_p_filter(jnp.asarray(LOGITS), 1.0)) == [True] * 5


def test_min_p():
    # Relative to the top prob 0.5: min_p=0.2 keeps p >= 0.1.
    assert kept(min_p_filter(jnp.asarray(LOGITS), 0.2)) == [True, True, True, False, False]
    assert kept(min_p_filter(jnp.asarray(LOGITS), 0.0)) == [True] * 5


def test_filters_compose_in_order_and_temperature_flattens():
    x = filter_logits(jnp.asarray(LOGITS), temperature=1.0, top_k=4, top_p=0.9, min_p=0.0)
    assert kept(x) == [True, True, True, False, False]
    # At temperature 2 the distribution flattens: probs ~ sqrt(p) normalised, so top_p=0.8 keeps four.
    hot = filter_logits(jnp.asarray(LOGITS), temperature=2.0, top_p=0.8)
    assert kept(hot) == [True, True, True, True, False]


@pytest.mark.slow
def test_sampling_frequencies_respect_filters():
    keys = jax.random.split(jax.random.key(0), 4000)
    draw = jax.vmap(lambda k: sample_from_logits(k, jnp.asarray(LOGITS), temperature=1.0, top_k=3))(keys)[:, 0]
    counts = np.bincount(np.asarray(draw), minlength=5) / 4000
    assert counts[3] == 0 and counts[4] == 0
    np.testing.assert_allclose(counts[:3], np.array([0.5, 0.25, 0.15]) / 0.9, atol=0.03)
    # top-k with top-p: the candidate path gives the same distribution as filtering the whole row.
    draw = jax.vmap(lambda k: sample_from_logits(k, jnp.asarray(LOGITS), top_k=4, top_p=0.7))(keys)[:, 0]
    counts = np.bincount(np.asarray(draw), minlength=5) / 4000
    np.testing.assert_allclose(counts, np.array([0.5, 0.25, 0, 0, 0]) / 0.75, atol=0.03)
    greedy = sample_from_logits(jax.random.key(1), jnp.asarray(LOGITS[:, ::-1]), temperature=0.0)
    assert int(greedy[0]) == 4


def test_logprob_and_entropy_by_hand():
    lp, ent = logprob_and_entropy(jnp.asarray(LOGITS), jnp.array([1]))
    p = np.exp(LOGITS[0]) / np.exp(LOGITS[0]).sum()
    np.testing.assert_allclose(float(lp[0]), np.log(p[1]), rtol=1e-5)
    np.testing.assert_allclose(float(ent[0]), -(p * np.log(p)).sum(), rtol=1e-5)


def test_left_pad_and_errors():
    tokens, mask = left_pad([[1, 2, 3], [4]], pad_id=0)
    assert tokens.shape == (2, 16) and tokens[0, -3:].tolist() == [1, 2, 3] and mask[1].sum() == 1
    with pytest.raises(ValueError, match="at least one token"):
        left_pad([[1], []], pad_id=0)


PROMPTS = [[151644, 872, 198, 9707, 1879], [3838, 374, 279, 6722, 315, 9625, 30, 151645, 198], [40, 1075]]


def _recompute_logprobs(model, prompt, completion):
    seq = jnp.asarray([list(prompt) + list(completion)])
    logits, _ = model(seq)
    logp = jax.nn.log_softmax(logits[0], axis=-1)
    idx = np.arange(len(prompt) - 1, len(prompt) + len(completion) - 1)
    return np.asarray(logp[idx, np.asarray(completion)])


@pytest.mark.slow
def test_decode_with_cache_equals_full_recompute(tiny_qwen3_model):
    out = sample(tiny_qwen3_model, PROMPTS, max_new_tokens=12, temperature=1.0, eos_ids=(-1,), pad_id=0, seed=3)
    assert out.lengths.tolist() == [12, 12, 12]
    for prompt, comp, lps in zip(PROMPTS, out.completions(), out.logprobs):
        np.testing.assert_allclose(lps[: len(comp)], _recompute_logprobs(tiny_qwen3_model, prompt, comp), atol=1e-4)


@pytest.mark.slow
def test_eos_stops_each_sequence(tiny_qwen3_model):
    free = sample(tiny_qwen3_model, PROMPTS, max_new_tokens=8, temperature=0.0, eos_ids=(-1,), pad_id=7)
    stop = int(free.tokens[0, 2])
    out = sample(tiny_qwen3_model, PROMPTS, max_new_tokens=8, temperature=0.0, eos_ids=(stop,), pad_id=7)
    first = np.argmax(free.tokens[0] == stop)
    assert out.lengths[0] == first + 1
    assert out.tokens[0, : first + 1].tolist() == free.tokens[0, : first + 1].tolist()
    assert (out.tokens[0, first + 1:] == 7).all() and (out.logprobs[0, first + 1:] == 0).all()
    for r in (1, 2):  # rows that never emit the id run to the end, unchanged
        if stop not in free.tokens[r]:
            assert out.lengths[r] == 8 and out.tokens[r].tolist() == free.tokens[r].tolist()


@pytest.mark.slow
def test_seeded_determinism(tiny_qwen3_model):
    kw = dict(max_new_tokens=10, temperature=1.0, top_k=50, top_p=0.95, eos_ids=(-1,), pad_id=0)
    a = sample(tiny_qwen3_model, PROMPTS, seed=11, **kw)
    b = sample(tiny_qwen3_model, PROMPTS, seed=11, **kw)
    c = sample(tiny_qwen3_model, PROMPTS, seed=12, **kw)
    assert (a.tokens == b.tokens).all() and np.array_equal(a.logprobs, b.logprobs)
    assert not (a.tokens == c.tokens).all()


def _repeated_cache_greedy(model, tokens, mask, g, new):
    """Reference sampler: each prompt copied G times into one plain cache, greedy decode, no prefixes."""
    tok = jnp.asarray(np.repeat(tokens, g, 0))
    msk = jnp.asarray(np.repeat(mask, g, 0))
    cache = KVCache.empty(model.cfg, tok.shape[0], tok.shape[1] + new)
    logits, cache = model(tok, mask_bt=msk, cache=cache)
    first = np.asarray(logits[:, -1])
    step, out = logits[:, -1], []
    for _ in range(new):
        nxt = jnp.argmax(step, -1).astype(jnp.int32)
        out.append(np.asarray(nxt))
        step, cache = model(nxt[:, None], cache=cache)
        step = step[:, 0]
    return first, np.stack(out, 1)


@pytest.mark.slow
def test_prefix_sampler_equals_repeated_cache_sampler(tiny_qwen3_model):
    g, new = 3, 8
    tokens, mask = left_pad(PROMPTS, pad_id=0)
    shared, prefix = prefill(tiny_qwen3_model, jnp.asarray(tokens), jnp.asarray(mask), num_samples=g)
    assert prefix.k.shape[1] == len(PROMPTS)  # one copy per prompt, not per sample
    first_ref, toks_ref = _repeated_cache_greedy(tiny_qwen3_model, tokens, mask, g, new)
    assert shared.shape == (len(PROMPTS) * g, tiny_qwen3_model.cfg.vocab_size)
    np.testing.assert_allclose(np.asarray(shared), first_ref, atol=1e-5)
    out = sample(tiny_qwen3_model, PROMPTS, num_samples=g, max_new_tokens=new, temperature=0.0, eos_ids=(-1,),
                 pad_id=0)
    np.testing.assert_array_equal(out.tokens, toks_ref)
    # The G samples of one prompt differ from each other (independent keys per row).
    out = sample(tiny_qwen3_model, PROMPTS, num_samples=4, max_new_tokens=6, temperature=1.0, eos_ids=(-1,),
                 pad_id=0, seed=0)
    assert out.tokens.shape == (len(PROMPTS) * 4, 6)
    assert len({tuple(r) for r in out.tokens[:4]}) > 1
