"""Logit filters for sampling: temperature, top-k, top-p (nucleus), min-p. Pure jnp functions.

Order (as in transformers' warpers): temperature, then top-k, then top-p, then min-p. Removed tokens get
-inf; the most likely token always survives, so a row is never empty.

Filters act on each row alone; `sample_from_logits` draws either with one key for the whole batch or with
one key per row (then a row's draw depends only on its key and its logits, not on the other rows).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

NEG_INF = -jnp.inf


def apply_temperature(logits_bv: jax.Array, temperature) -> jax.Array:
    t = jnp.asarray(temperature, jnp.float32)
    return logits_bv.astype(jnp.float32) / jnp.where(t > 0, t, 1.0)


def top_k_filter(logits_bv: jax.Array, k: int) -> jax.Array:
    """Keep the k largest logits per row (k static; 0 or >= V disables). Ties at the k-th value survive."""
    v = logits_bv.shape[-1]
    if k <= 0 or k >= v:
        return logits_bv
    kth = jax.lax.top_k(logits_bv, k)[0][..., -1:]
    return jnp.where(logits_bv >= kth, logits_bv, NEG_INF)


def top_p_filter(logits_bv: jax.Array, p) -> jax.Array:
    """Smallest set of most likely tokens whose probability reaches p (p >= 1 keeps all).

    A token is kept when the probability mass strictly before it (in descending order) is below p.
    """
    p = jnp.asarray(p, jnp.float32)
    sorted_desc = jnp.sort(logits_bv, axis=-1)[..., ::-1]
    probs = jax.nn.softmax(sorted_desc, axis=-1)
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    keep_sorted = mass_before < p
    # The threshold is the smallest kept logit; everything at or above it stays.
    n_keep = jnp.maximum(keep_sorted.sum(-1, keepdims=True), 1)
    threshold = jnp.take_along_axis(sorted_desc, n_keep - 1, axis=-1)
    filtered = jnp.where(logits_bv >= threshold, logits_bv, NEG_INF)
    return jnp.where(p >= 1.0, logits_bv, filtered)


def min_p_filter(logits_bv: jax.Array, min_p) -> jax.Array:
    """Drop tokens whose probability is below min_p times the top token's probability."""
    min_p = jnp.asarray(min_p, jnp.float32)
    # prob_i / prob_max = exp(logit_i - logit_max): no softmax needed.
    top = jnp.max(logits_bv, axis=-1, keepdims=True)
    keep = logits_bv - top >= jnp.log(jnp.maximum(min_p, 1e-30))
    return jnp.where((min_p > 0) & ~keep, NEG_INF, logits_bv)


def filter_logits(logits_bv, *, temperature=1.0, top_k: int = 0, top_p=1.0, min_p=0.0, use_top_p: bool = True):
    """All filters in order. `use_top_p=False` (static) skips the full-vocabulary sort of top-p."""
    x = apply_temperature(logits_bv, temperature)
    x = top_k_filter(x, top_k)
    if use_top_p:
        x = top_p_filter(x, top_p)
    return min_p_filter(x, min_p)


def _is_key_batch(key, rows: int) -> bool:
    """Whether `key` holds one PRNG key per row: a typed key array of shape (B,) or raw uint32 keys (B, 2)."""
    typed = jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
    shape = key.shape if typed else key.shape[:-1]
    if len(shape) == 0:
        return False
    if shape != (rows,):
        raise ValueError(f"per-row keys: expected {rows} keys, got key array of shape {key.shape}")
    return True


def _categorical(key, logits_bv):
    """One categorical draw per row: with one key for the batch, or with row b's key for row b."""
    if _is_key_batch(key, logits_bv.shape[0]):
        return jax.vmap(lambda k, row: jax.random.categorical(k, row, axis=-1))(key, logits_bv)
    return jax.random.categorical(key, logits_bv, axis=-1)


def sample_from_logits(key, logits_bv, *, temperature=1.0, top_k: int = 0, top_p=1.0, min_p=0.0,
                       use_top_p: bool = True):
    """Next tokens (B,) int32; temperature 0 means greedy (argmax of the raw logits).

    key: one PRNG key for the whole batch, or one per row (a key array of shape (B,)): then row b's
    token depends only on key[b] and logits_bv[b].
    With top-k set, top-p and min-p run on the k candidates only: the same distribution as filtering
    the whole vocabulary (ties at the k-th logit aside), without sorting V logits every step.
    """
    v = logits_bv.shape[-1]
    if 0 < top_k < v:
        vals, idx = jax.lax.top_k(apply_temperature(logits_bv, temperature), top_k)
        if use_top_p:
            vals = top_p_filter(vals, top_p)
        vals = min_p_filter(vals, min_p)
        choice = _categorical(key, vals)
        sampled = jnp.take_along_axis(idx, choice[:, None], axis=-1)[:, 0]
    else:
        filtered = filter_logits(logits_bv, temperature=temperature, top_p=top_p, min_p=min_p, use_top_p=use_top_p)
        sampled = _categorical(key, filtered)
    greedy = jnp.argmax(logits_bv, axis=-1)
    return jnp.where(jnp.asarray(temperature) > 0, sampled, greedy).astype(jnp.int32)


def logprob_and_entropy(logits_bv, tokens_b, temperature=1.0):
    """log pi(token) and the entropy of pi, where pi = softmax(logits / temperature) (unfiltered)."""
    logp = jax.nn.log_softmax(apply_temperature(logits_bv, temperature), axis=-1)
    chosen = jnp.take_along_axis(logp, tokens_b[:, None], axis=-1)[:, 0]
    entropy = -jnp.sum(jnp.exp(logp) * logp, axis=-1)
    return chosen, entropy
