"""Device functions of the judge: prefix-tree scoring through the model's own layers.

Layout of one scoring call (shape letters of DESIGN.md section 2, plus J units per head, R reads):

  heads     tokens_ht  (Hn, T1)     [instructions, prompt, response a (, "Response 2" header)]
  units     tokens_hjt (Hn, J, T)   per head, J units; a unit is [body | suffix_1 | ... | suffix_k]
                                    body = [response b, criterion header] (pairwise) or empty
                                    (pointwise); suffix_c = [criterion c, question, answer cue]
  reads     read_hjr   (Hn, J, R)   index in the unit of each suffix's last token (the answer cue)

Heads are run first (causal, right padded) and keep their per-layer keys/values. Units then run in one
pass with a tree mask: body tokens see the head (their head's keys, shared by its J units without a
copy) and the body causally; suffix tokens see the head, the body and their own suffix causally, never
another suffix. Rotary positions continue from the head for the body and restart after the body for
every suffix, so each suffix is scored exactly as if it followed [head, body] alone. Only the hidden
states at the reads go through the final norm and unembedding, and only the verdict tokens' logits
(plus the full-vocabulary log-sum-exp, for the verdict-token mass) leave the device.

The layers are the model's own modules (projections, norms, MLP: LoRA wrappers included), iterated
with lax.scan over their stacked weights so a 30-layer model compiles one layer body, not thirty.
The attention arithmetic mirrors models.transformer.Attention (dtypes, qk-norm, rotary, masking);
tests check it against the model's forward to 1e-4.

`full_score` is the unshared reference: every judgment as one full sequence through the model forward.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from flax import nnx

from rubric_jax.models.transformer import _MASK_VALUE, apply_rope, rope_inv_freq


def _qkv(attn, x_btd, pos_bt, inv_freq):
    q = attn.q_proj(x_btd)  # (B, T, N, H)
    k = attn.k_proj(x_btd)  # (B, T, K, H)
    v = attn.v_proj(x_btd)
    if attn.cfg.qk_norm:
        q, k = attn.q_norm(q), attn.k_norm(k)
    return apply_rope(q, pos_bt, inv_freq), apply_rope(k, pos_bt, inv_freq), v


def _softmax_parts(*scores):
    """softmax over the concatenation of the parts' last axes, returned as parts (no concatenated copy)."""
    m = functools.reduce(jnp.maximum, [jnp.max(x, axis=-1, keepdims=True) for x in scores])
    es = [jnp.exp(x - m) for x in scores]
    inv = 1.0 / functools.reduce(jnp.add, [jnp.sum(e, axis=-1, keepdims=True) for e in es])
    return [e * inv for e in es]


def _finish_block(layer, x_btd, out_btnh):
    b, t, n, h = out_btnh.shape
    x = x_btd + layer.self_attn.o_proj(out_btnh.astype(x_btd.dtype))
    return x + layer.mlp(layer.post_attention_layernorm(x))


def _head_layer(layer, x_btd, pos_bt, inv_freq, mask_btt):
    """One decoder block over the heads (plain causal, right-padding masked); returns its K/V too."""
    q, k, v = _qkv(layer.self_attn, layer.input_layernorm(x_btd), pos_bt, inv_freq)
    b, t, n, h = q.shape
    kh = k.shape[2]
    qg = q.reshape(b, t, kh, n // kh, h)
    s = jnp.einsum("btkgh,bskh->bkgts", qg, k.astype(q.dtype), preferred_element_type=jnp.float32) / math.sqrt(h)
    s = jnp.where(mask_btt[:, None, None], s, _MASK_VALUE)
    p = jax.nn.softmax(s, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgts,bskh->btkgh", p, v, preferred_element_type=jnp.float32).reshape(b, t, n, h)
    return _finish_block(layer, x_btd, out), (k, v)


def _unit_layer(layer, x_1nd, pos_1n, inv_freq, pk_hskd, pv_hskd, head_mask_hs, dims, bmask_hjtt, body_valid_hjt,
                lmask_hjcqq):
    """One decoder block over all unit tokens (bodies then lanes, flattened into one row).

    Body queries attend to [head, body (causal)]; lane queries to [head, body (all real tokens), own
    lane (causal within the same suffix)]. One softmax over the concatenated key sets per query.
    """
    hn, j, tb, lc, ln = dims
    nb = hn * j * tb
    q, k, v = _qkv(layer.self_attn, layer.input_layernorm(x_1nd), pos_1n, inv_freq)
    q, k, v = q[0], k[0], v[0]  # (N, heads, H)
    n, hd = q.shape[1], q.shape[2]
    kh = k.shape[1]
    g = n // kh
    dt = pk_hskd.dtype
    qb = q[:nb].reshape(hn, j, tb, kh, g, hd)
    ql = q[nb:].reshape(hn, j, lc, ln, kh, g, hd)
    kb = k[:nb].reshape(hn, j, tb, kh, hd).astype(dt)
    vb = v[:nb].reshape(hn, j, tb, kh, hd).astype(dt)
    kl = k[nb:].reshape(hn, j, lc, ln, kh, hd).astype(dt)
    vl = v[nb:].reshape(hn, j, lc, ln, kh, hd).astype(dt)
    scale = 1.0 / math.sqrt(hd)
    f32 = jnp.float32
    pk = pk_hskd.astype(q.dtype)

    # body queries: [head | body]
    s_p = jnp.einsum("hjtkgd,hskd->hjkgts", qb, pk, preferred_element_type=f32) * scale
    s_b = jnp.einsum("hjtkgd,hjukd->hjkgtu", qb, kb.astype(q.dtype), preferred_element_type=f32) * scale
    s_p = jnp.where(head_mask_hs[:, None, None, None, None, :], s_p, _MASK_VALUE)
    s_b = jnp.where(bmask_hjtt[:, :, None, None], s_b, _MASK_VALUE)
    p_p, p_b = (x.astype(dt) for x in _softmax_parts(s_p, s_b))
    out_b = (jnp.einsum("hjkgts,hskd->hjtkgd", p_p, pv_hskd, preferred_element_type=f32)
             + jnp.einsum("hjkgtu,hjukd->hjtkgd", p_b, vb, preferred_element_type=f32))

    # lane queries: [head | body | own lane]
    s_p = jnp.einsum("hjcqkgd,hskd->hjckgqs", ql, pk, preferred_element_type=f32) * scale
    s_b = jnp.einsum("hjcqkgd,hjukd->hjckgqu", ql, kb.astype(q.dtype), preferred_element_type=f32) * scale
    s_l = jnp.einsum("hjcqkgd,hjcukd->hjckgqu", ql, kl.astype(q.dtype), preferred_element_type=f32) * scale
    s_p = jnp.where(head_mask_hs[:, None, None, None, None, None, :], s_p, _MASK_VALUE)
    s_b = jnp.where(body_valid_hjt[:, :, None, None, None, None, :], s_b, _MASK_VALUE)
    s_l = jnp.where(lmask_hjcqq[:, :, :, None, None], s_l, _MASK_VALUE)
    p_p, p_b, p_l = (x.astype(dt) for x in _softmax_parts(s_p, s_b, s_l))
    out_l = (jnp.einsum("hjckgqs,hskd->hjcqkgd", p_p, pv_hskd, preferred_element_type=f32)
             + jnp.einsum("hjckgqu,hjukd->hjcqkgd", p_b, vb, preferred_element_type=f32)
             + jnp.einsum("hjckgqu,hjcukd->hjcqkgd", p_l, vl, preferred_element_type=f32))
    out = jnp.concatenate([out_b.reshape(nb, n, hd), out_l.reshape(-1, n, hd)], 0)[None]
    return _finish_block(layer, x_1nd, out)


def stack_layers(model):
    """(layer graphdef, layer states stacked on a leading L axis) to lax.scan the model's layers, or
    None when the layers differ in structure. The stacked copy is made once, outside the jitted calls."""
    splits = [nnx.split(layer) for layer in model.layers]
    gd0 = splits[0][0]
    if any(gd != gd0 for gd, _ in splits[1:]):
        return None
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *[st for _, st in splits])
    return gd0, stacked


def tree_score(model, head_tokens_ht, head_mask_ht, body_tokens_hjt, body_valid_hjt, lane_tokens_hjcq,
               lane_seg_hjcq, lane_relpos_hjcq, read_hjr, ids_v, layers=None):
    """Heads, then bodies and lanes through the tree mask; verdict-token logits at the reads.

    Shapes: heads (Hn, T1); bodies (Hn, J, Tb); lanes (Hn, J, Lc, L): each unit's suffixes packed into
    Lc lanes of L tokens. lane_seg: 1, 2, ... numbers the suffixes within a lane, 0 marks padding.
    lane_relpos: position of a suffix token within its suffix. read_hjr: index of each suffix's last
    token in the unit's flattened lanes (Lc * L). Returns (logits (Hn, J, R, V'), lse (Hn, J, R)).
    """
    hn, t1 = head_tokens_ht.shape
    _, j, tb = body_tokens_hjt.shape
    _, _, lc, ln = lane_tokens_hjcq.shape
    inv_freq = jnp.asarray(rope_inv_freq(model.cfg))
    # heads: right padded, causal over real tokens
    hpos = jnp.maximum(jnp.cumsum(head_mask_ht, axis=1) - 1, 0)
    hmask = jnp.tril(jnp.ones((t1, t1), bool))[None] & head_mask_ht[:, None, :]
    hlen = head_mask_ht.sum(-1).astype(jnp.int32)  # (Hn,)
    blen = body_valid_hjt.sum(-1).astype(jnp.int32)  # (Hn, J)
    # bodies continue the head's positions; every suffix restarts right after its body
    bpos = jnp.broadcast_to(hlen[:, None, None] + jnp.arange(tb)[None, None, :], (hn, j, tb))
    lpos = (hlen[:, None] + blen)[:, :, None, None] + lane_relpos_hjcq
    pos = jnp.concatenate([bpos.reshape(-1), lpos.reshape(-1)])[None]
    bmask = (jnp.tril(jnp.ones((tb, tb), bool))[None, None] & body_valid_hjt[:, :, None, :])
    causal = jnp.tril(jnp.ones((ln, ln), bool))
    seg_q, seg_k = lane_seg_hjcq[..., :, None], lane_seg_hjcq[..., None, :]
    lmask = causal & (seg_q == seg_k) & (seg_k > 0)  # (Hn, J, Lc, L, L)
    dims = (hn, j, tb, lc, ln)

    xh = model.embed_tokens(head_tokens_ht).astype(model.dtype)
    xu = model.embed_tokens(jnp.concatenate([body_tokens_hjt.reshape(-1), lane_tokens_hjcq.reshape(-1)])[None])
    xu = xu.astype(model.dtype)

    def both(layer, xh, xu):
        xh, (k, v) = _head_layer(layer, xh, hpos, inv_freq, hmask)
        xu = _unit_layer(layer, xu, pos, inv_freq, k, v, head_mask_ht, dims, bmask, body_valid_hjt, lmask)
        return xh, xu

    if layers is None:
        for layer in model.layers:
            xh, xu = both(layer, xh, xu)
    else:
        gd, stacked = layers

        def body(carry, st):
            return both(nnx.merge(gd, st), *carry), None

        (xh, xu), _ = jax.lax.scan(body, (xh, xu), stacked)
    x = xu[0, hn * j * tb:].reshape(hn, j, lc * ln, -1)
    hid = jnp.take_along_axis(x, read_hjr[..., None], axis=2)  # (Hn, J, R, D)
    logits = model.logits(model.norm(hid))  # (Hn, J, R, V) f32
    return jnp.take(logits, ids_v, axis=-1), jax.nn.logsumexp(logits, axis=-1)


def full_score(model, tokens_bt, valid_bt, read_b, ids_v):
    """Reference: whole sequences (right padded) through the model forward, no cache, no sharing."""
    x, _ = model(tokens_bt, mask_bt=valid_bt, return_hidden=True)  # final-normed hidden states
    hid = jnp.take_along_axis(x, read_b[:, None, None], axis=1)[:, 0]  # (B, D)
    logits = model.logits(hid)
    return jnp.take(logits, ids_v, axis=-1), jax.nn.logsumexp(logits, axis=-1)


@functools.partial(jax.jit, static_argnames=("graphdef", "layer_graphdef"))
def tree_score_jit(graphdef, state, layer_graphdef, layer_states, *args):
    """layer_graphdef/layer_states from `stack_layers` (scan), or None/None (unrolled layers)."""
    layers = None if layer_graphdef is None else (layer_graphdef, layer_states)
    return tree_score(nnx.merge(graphdef, state), *args, layers=layers)


@functools.partial(jax.jit, static_argnames=("graphdef",))
def full_score_jit(graphdef, state, *args):
    return full_score(nnx.merge(graphdef, state), *args)


__all__ = ["stack_layers", "tree_score", "full_score", "tree_score_jit", "full_score_jit"]
