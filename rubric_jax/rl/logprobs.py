"""Per-token log-probabilities and entropies of completion tokens.

Shape letters (docs/architecture.md): B batch (sequences), T completion time, D model dim, V vocab.

The GRPO ratio and KL terms (docs/method.md) need log pi(y_t | y_<t) for every sampled token.
Materialising the (B, T, V) logits of a 150k-vocab model for a long completion costs more memory than the
rest of the step, so `token_logprobs_chunked` projects the final hidden states onto the vocabulary one
time-chunk at a time inside `lax.map`, rematerialising each chunk's logits in the backward pass
(`jax.checkpoint`). Only one (B, chunk, V) block is alive at once, forward or backward.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["token_logprobs", "token_logprobs_chunked"]


def token_logprobs(logits_btv: jax.Array, targets_bt: jax.Array,
                   temperature: float = 1.0) -> tuple[jax.Array, jax.Array]:
    """Reference (unchunked) log-probabilities and entropies of `targets_bt` under `logits_btv`.

    With z = logits / temperature (computed in float32) and lse = logsumexp_v z:
        logp_bt    = z[b, t, targets[b, t]] - lse[b, t]
        entropy_bt = lse[b, t] - sum_v softmax(z)[b, t, v] * z[b, t, v]     (= -sum_v p log p)

    Args:
      logits_btv: (B, T, V) logits, any float dtype.
      targets_bt: (B, T) integer token ids.
      temperature: sampling temperature the completions were drawn at (logits are divided by it).
    Returns:
      (logp_bt, entropy_bt), both (B, T) float32.
    """
    z_btv = logits_btv.astype(jnp.float32) / temperature
    lse_bt = jax.nn.logsumexp(z_btv, axis=-1)
    z_tgt_bt = jnp.take_along_axis(z_btv, targets_bt[..., None].astype(jnp.int32), axis=-1)[..., 0]
    p_btv = jnp.exp(z_btv - lse_bt[..., None])
    entropy_bt = lse_bt - jnp.sum(p_btv * z_btv, axis=-1)
    return z_tgt_bt - lse_bt, entropy_bt


def token_logprobs_chunked(hidden_btd: jax.Array, unembed_dv: jax.Array, targets_bt: jax.Array,
                           chunk: int = 128, temperature: float = 1.0) -> tuple[jax.Array, jax.Array]:
    """Log-probabilities and entropies of `targets_bt` under logits = hidden @ unembed, chunked over T.

    Same quantities as `token_logprobs(hidden_btd @ unembed_dv, targets_bt)`:
        logits_btv = einsum('btd,dv->btv', hidden, unembed)   (float32 accumulation)
        logp_bt    = logits[b, t, targets[b, t]] / temp - logsumexp_v(logits[b, t] / temp)
        entropy_bt = -sum_v p log p of softmax(logits[b, t] / temp)
    but evaluated `chunk` time steps at a time (lax.map over T-chunks, each chunk under jax.checkpoint),
    so the full (B, T, V) logits never exist, neither in the forward nor in the backward pass.
    T need not be divisible by `chunk`: the time axis is zero-padded internally and the padding is
    dropped from the result (padded positions get no gradient).

    Args:
      hidden_btd: (B, T, D) final (normed) hidden states, any float dtype.
      unembed_dv: (D, V) output projection (for tied embeddings pass embed_vd.T).
      targets_bt: (B, T) integer token ids to score.
      chunk: time steps per chunk; memory peak is about B * chunk * V * 4 bytes (times a small factor).
      temperature: sampling temperature (logits are divided by it).
    Returns:
      (logp_bt, entropy_bt), both (B, T) float32.
    """
    b, t, d = hidden_btd.shape
    chunk = max(1, min(int(chunk), t))
    n_chunks = -(-t // chunk)
    pad = n_chunks * chunk - t
    if pad:
        hidden_btd = jnp.pad(hidden_btd, ((0, 0), (0, pad), (0, 0)))
        targets_bt = jnp.pad(targets_bt, ((0, 0), (0, pad)))
    # (B, nC*c, D) -> (nC, B, c, D): lax.map runs over the leading axis.
    hidden_nbcd = hidden_btd.reshape(b, n_chunks, chunk, d).transpose(1, 0, 2, 3)
    targets_nbc = targets_bt.reshape(b, n_chunks, chunk).transpose(1, 0, 2)

    @jax.checkpoint
    def one_chunk(hidden_bcd, targets_bc):
        logits_bcv = jnp.einsum("bcd,dv->bcv", hidden_bcd, unembed_dv,
                                preferred_element_type=jnp.float32)
        return token_logprobs(logits_bcv, targets_bc, temperature)

    logp_nbc, ent_nbc = jax.lax.map(lambda xs: one_chunk(*xs), (hidden_nbcd, targets_nbc))
    logp_bt = logp_nbc.transpose(1, 0, 2).reshape(b, n_chunks * chunk)[:, :t]
    ent_bt = ent_nbc.transpose(1, 0, 2).reshape(b, n_chunks * chunk)[:, :t]
    return logp_bt, ent_bt
