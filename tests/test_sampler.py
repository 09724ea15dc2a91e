"""Sampler: logit filters on hand-made logits, EOS handling, determinism, cache vs recompute, prompts as a
shared prefix vs a repeated cache, per-prompt randomness that does not depend on the rest of the batch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rubric_jax.models.transformer import KVCache
from rubric_jax.sampling import filter_logits, left_pad, prefill, sample, sample_from_logits
from rubric_jax.sampling.sampler import prompt_keys_for
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


@pytest.mark.slow
def test_per_row_keys_draw_each_row_alone():
    rng = np.random.default_rng(0)
    logits = jnp.asarray(rng.normal(size=(6, 40)).astype(np.float32) * 3)
    keys = jax.random.split(jax.random.key(4), 6)
    for kw in (dict(), dict(top_k=10, top_p=0.9), dict(top_p=0.8, min_p=0.05), dict(temperature=0.5, top_k=5)):
        together = np.asarray(sample_from_logits(keys, logits, **kw))
        alone = [int(sample_from_logits(keys[b:b + 1], logits[b:b + 1], **kw)[0]) for b in range(6)]
        assert together.tolist() == alone, kw
        # reordering the rows (and their keys) reorders the draws
        perm = np.array([3, 0, 5, 1, 4, 2])
        assert np.asarray(sample_from_logits(keys[perm], logits[perm], **kw)).tolist() == together[perm].tolist()
        raw = np.asarray(sample_from_logits(jax.random.key_data(keys), logits, **kw))  # raw uint32 keys work too
        assert raw.tolist() == together.tolist()
    with pytest.raises(ValueError, match="expected 6 keys"):
        sample_from_logits(keys[:5], logits)


@pytest.mark.slow
def test_per_row_keys_frequencies_respect_filters():
    n = 4000
    keys = jax.random.split(jax.random.key(0), n)
    rows = jnp.asarray(np.repeat(LOGITS, n, 0))
    counts = np.bincount(np.asarray(sample_from_logits(keys, rows, top_k=3)), minlength=5) / n
    assert counts[3] == 0 and counts[4] == 0
    np.testing.assert_allclose(counts[:3], np.array([0.5, 0.25, 0.15]) / 0.9, atol=0.03)
    counts = np.bincount(np.asarray(sample_from_logits(keys, rows, top_p=0.7)), minlength=5) / n
    np.testing.assert_allclose(counts, np.array([0.5, 0.25, 0, 0, 0]) / 0.75, atol=0.03)


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
# One sampler program serves most tests below: 3 prompts (or 1 or 2) left-padded to 16, G=3, 8 new tokens, no
# EOS, pad 0 (the sampler compiles once per batch size, G, length, static filter switch, EOS ids and pad id).
SHARED = dict(max_new_tokens=8, num_samples=3, eos_ids=(-1,), pad_id=0, prompt_length=16)


def _recompute_logprobs(model, prompt, completion):
    seq = jnp.asarray([list(prompt) + list(completion)])
    logits, _ = model(seq)
    logp = jax.nn.log_softmax(logits[0], axis=-1)
    idx = np.arange(len(prompt) - 1, len(prompt) + len(completion) - 1)
    return np.asarray(logp[idx, np.asarray(completion)])


@pytest.mark.slow
def test_decode_with_cache_equals_full_recompute(tiny_qwen3_model):
    out = sample(tiny_qwen3_model, PROMPTS, temperature=1.0, seed=3, **SHARED)
    assert out.lengths.tolist() == [8] * 9
    for prompt, comp, lps in zip([p for p in PROMPTS for _ in range(3)], out.completions(), out.logprobs):
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
    kw = dict(temperature=1.0, top_k=50, top_p=0.95, **SHARED)
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
    out = sample(tiny_qwen3_model, PROMPTS, temperature=1.0, seed=0, **SHARED)
    assert out.tokens.shape == (len(PROMPTS) * 3, 8)
    assert len({tuple(r) for r in out.tokens[:3]}) > 1


OTHER = [11, 12, 13, 14, 15, 16]  # another prompt, to pair with PROMPTS[1]


@pytest.mark.slow
@pytest.mark.parametrize("filters", [dict(), dict(top_k=50, top_p=0.9, min_p=0.01)])
def test_a_prompts_samples_do_not_depend_on_the_batch(tiny_qwen3_model, filters):
    g = SHARED["num_samples"]
    kw = dict(temperature=1.0, **SHARED, **filters)
    keys = jax.random.split(jax.random.key(5), len(PROMPTS))  # one key per prompt, e.g. by global index
    together = sample(tiny_qwen3_model, PROMPTS, prompt_keys=keys, **kw)
    rows_b = slice(g, 2 * g)
    alone = sample(tiny_qwen3_model, [PROMPTS[1]], prompt_keys=keys[1:2], **kw)
    np.testing.assert_array_equal(alone.tokens, together.tokens[rows_b])
    np.testing.assert_allclose(alone.logprobs, together.logprobs[rows_b], atol=1e-5)
    np.testing.assert_allclose(alone.entropy, together.entropy[rows_b], atol=1e-4)
    # B second behind another prompt with an unrelated key: B's rows unchanged
    pair = sample(tiny_qwen3_model, [OTHER, PROMPTS[1]], prompt_keys=jnp.stack([jax.random.key(99), keys[1]]), **kw)
    np.testing.assert_array_equal(pair.tokens[g:], together.tokens[rows_b])
    # the G samples of a prompt differ from each other, and another key gives other samples
    assert len({tuple(r) for r in alone.tokens}) > 1
    other_key = sample(tiny_qwen3_model, [PROMPTS[1]], prompt_keys=keys[0:1], **kw)
    assert not np.array_equal(other_key.tokens, alone.tokens)


@pytest.mark.slow
def test_seed_gives_prompt_b_the_key_fold_in_b(tiny_qwen3_model):
    kw = dict(temperature=1.0, **SHARED)
    by_seed = sample(tiny_qwen3_model, PROMPTS, seed=7, **kw)
    again = sample(tiny_qwen3_model, PROMPTS, seed=7, **kw)
    np.testing.assert_array_equal(by_seed.tokens, again.tokens)
    np.testing.assert_array_equal(by_seed.logprobs, again.logprobs)
    by_key = sample(tiny_qwen3_model, PROMPTS, seed=jax.random.key(7), **kw)  # an int seed means key(seed)
    np.testing.assert_array_equal(by_key.tokens, by_seed.tokens)
    explicit = sample(tiny_qwen3_model, PROMPTS, prompt_keys=prompt_keys_for(7, 3), **kw)
    np.testing.assert_array_equal(explicit.tokens, by_seed.tokens)
    last = sample(tiny_qwen3_model, PROMPTS[2:], prompt_keys=jax.random.fold_in(jax.random.key(7), 2)[None], **kw)
    np.testing.assert_array_equal(last.tokens, by_seed.tokens[6:])
    with pytest.raises(ValueError, match="one per prompt"):
        sample(tiny_qwen3_model, PROMPTS, prompt_keys=prompt_keys_for(7, 2), **kw)
