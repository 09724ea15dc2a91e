"""Device functions of the judge: prefix-tree scoring as three ordinary calls of the model's forward.

Layout of one scoring call (shape letters B, T, D, V; plus Hn heads, J units per head, R reads):

  heads     tokens_ht  (Hn, T1)       [instructions, prompt, response a (, "Response 2" header)]
  bodies    tokens_hjt (Hn, J, Tb)    per head, J bodies: [response b, criterion header] (pairwise)
                                      or empty (pointwise)
  lanes     tokens     (Hn, J, Lc, L) each unit's criterion suffixes [criterion, question, answer
                                      cue] packed into Lc lanes of L tokens
  reads     read_hjr   (Hn, J, R)     index in the unit's flattened lanes of each suffix's last token

  1. heads  = model(heads)                                       -> a shared prefix of Hn rows
  2. bodies = model(bodies, prefixes=(heads,))                   -> a prefix of Hn*J rows (J per head)
  3. lanes  = model(lanes, prefixes=(heads, bodies), chunk_mask_btt=tree mask), one row per lane
Lane tokens see their head, their body and their own suffix causally, never another suffix. Rotary
positions continue from the head for the body and restart after the body for every suffix, so each
suffix is scored exactly as if it followed [head, body] alone. Only the hidden states at the reads
are unembedded, and only the verdict tokens' logits (plus the full-vocabulary log-sum-exp, for the
verdict-token mass) leave the device. No attention arithmetic lives here: it is the model's.

`full_score` is the unshared reference: every judgment as one full sequence through the same forward.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx


def lane_tree_mask(lane_seg_bq, lane_len: int):
    """(B, Q, Q) mask over a row of packed lanes: same lane, same suffix (seg > 0), causal."""
    q = lane_seg_bq.shape[-1]
    idx = jnp.arange(q)
    same_lane = (idx[:, None] // lane_len) == (idx[None, :] // lane_len)
    causal = idx[None, :] <= idx[:, None]
    seg_q, seg_k = lane_seg_bq[:, :, None], lane_seg_bq[:, None, :]
    return (same_lane & causal)[None] & (seg_q == seg_k) & (seg_k > 0)


def tree_score(model, head_tokens_ht, head_mask_ht, body_tokens_hjt, body_valid_hjt, lane_tokens_hjcq,
               lane_seg_hjcq, lane_relpos_hjcq, read_hjr, ids_v):
    """Heads, then bodies, then lanes through the model; verdict-token logits at the reads.

    Heads and bodies are right padded. lane_seg: 1, 2, ... numbers the suffixes within a lane, 0 marks
    padding; lane_relpos: a suffix token's position within its suffix. Returns (logits (Hn, J, R, V'),
    lse (Hn, J, R)).
    """
    hn, _ = head_tokens_ht.shape
    _, j, tb = body_tokens_hjt.shape
    _, _, lc, ln = lane_tokens_hjcq.shape
    with jax.named_scope("judge/heads"):
        _, heads = model(head_tokens_ht, mask_bt=head_mask_ht, return_hidden=True, return_kv=True)
        heads = heads.as_prefix()
    with jax.named_scope("judge/bodies"):
        _, bodies = model(body_tokens_hjt.reshape(hn * j, tb), mask_bt=body_valid_hjt.reshape(hn * j, tb),
                          prefixes=(heads,), return_hidden=True, return_kv=True)
        bodies = bodies.as_prefix()
    with jax.named_scope("judge/lanes"):
        # One row per lane (Hn*J*Lc rows of L tokens): attention within a lane is (L, L), not (Lc*L)^2.
        hlen = head_mask_ht.sum(-1).astype(jnp.int32)  # (Hn,)
        blen = body_valid_hjt.sum(-1).astype(jnp.int32)  # (Hn, J)
        pos = (hlen[:, None] + blen)[:, :, None, None] + lane_relpos_hjcq  # every suffix restarts after its body
        rows = hn * j * lc
        seg = lane_seg_hjcq.reshape(rows, ln)
        x, _ = model(lane_tokens_hjcq.reshape(rows, ln), pos.reshape(rows, ln), mask_bt=seg > 0,
                     prefixes=(heads, bodies), chunk_mask_btt=lane_tree_mask(seg, ln), return_hidden=True)
    with jax.named_scope("judge/readout"):
        hid = jnp.take_along_axis(x.reshape(hn, j, lc * ln, -1), read_hjr[..., None], axis=2)  # (Hn, J, R, D)
        logits = model.logits(hid)  # (Hn, J, R, V) f32
        return jnp.take(logits, ids_v, axis=-1), jax.nn.logsumexp(logits, axis=-1)


def full_score(model, tokens_bt, valid_bt, read_b, ids_v):
    """Reference: whole sequences (right padded) through the model forward, no cache, no sharing."""
    x, _ = model(tokens_bt, mask_bt=valid_bt, return_hidden=True)  # final-normed hidden states
    hid = jnp.take_along_axis(x, read_b[:, None, None], axis=1)[:, 0]  # (B, D)
    logits = model.logits(hid)
    return jnp.take(logits, ids_v, axis=-1), jax.nn.logsumexp(logits, axis=-1)


@functools.partial(jax.jit, static_argnames=("graphdef",))
def tree_score_jit(graphdef, state, *args):
    return tree_score(nnx.merge(graphdef, state), *args)


@functools.partial(jax.jit, static_argnames=("graphdef",))
def full_score_jit(graphdef, state, *args):
    return full_score(nnx.merge(graphdef, state), *args)


__all__ = ["lane_tree_mask", "tree_score", "full_score", "tree_score_jit", "full_score_jit"]
