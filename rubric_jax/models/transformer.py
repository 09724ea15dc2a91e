"""Qwen3 / Qwen2 / Llama decoder in Flax NNX.

One forward serves every caller:
  training            tokens (B, T), no cache                      -> logits (B, T, V)
  prefill             tokens (B, T), empty cache                   -> logits, cache holding T slots
  decode              tokens (B, 1), cache (+ shared prefixes)     -> logits, cache + 1 slot
  prefix-tree scoring tokens (B, T), shared prefixes, tree mask    -> logits or hidden states

Shared prefixes (`prefixes=(Prefix, ...)`): a prefix is a per-layer key/value block (L, P, K, S, H)
with a validity mask (P, S), read by B/P consecutive rows. Each query attends to all its prefixes
plus its own cache or chunk with one softmax taken across the parts (a common max and sum, never a
concatenated or repeated copy of a prefix). The sampler decodes B*G rows against the B prompts'
prefix; the judge scores response bodies against instruction heads, and criterion lanes against
both. Rotary positions of a row continue after the real tokens of its prefixes.

Layer weights are stacked on a leading "layers" axis and run with `lax.scan` (one compiled layer
body), with optional rematerialisation; `cfg.scan_layers=False` unrolls the same stacked weights.
Left padding is expressed by `mask_bt` (True = real token). The model knows nothing of training:
LoRA wraps `Linear` modules from outside (models/lora.py), sharding is read from each parameter's
logical `axes` (models/sharding.py) and from JAX's own mesh context.

Shape letters: B batch, T chunk length, S cache/prefix length, D model dim, N query heads, K kv
heads, G = N/K query heads per kv head, H head dim, F MLP hidden, V vocab, L layers, P prefix rows.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rubric_jax.models.config import ModelConfig
from rubric_jax.models.sharding import constrain

# Finite, not -inf: a query row whose keys are all padding (a left-pad position) must not give NaN.
_MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class KVCache:
    """Keys/values of every layer plus which slots are real tokens and where the next chunk goes."""

    # Heads before slots, so both attention matmuls batch over (B, K) with no transpose of the cache.
    k: jax.Array  # (L, B, K, S, H), or a tuple of L (B, K, S, H) arrays (see unstack)
    v: jax.Array
    valid_bs: jax.Array  # (B, S) bool: slot holds a real (non-pad) token
    index: jax.Array  # () int32: next slot to write

    @property
    def size(self) -> int:
        return self.valid_bs.shape[1]  # S

    @classmethod
    def empty(cls, cfg: ModelConfig, batch: int, size: int, dtype=jnp.float32) -> "KVCache":
        shape = (cfg.num_layers, batch, cfg.num_kv_heads, size, cfg.head_dim)
        return cls(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype), valid_bs=jnp.zeros((batch, size), bool),
                   index=jnp.zeros((), jnp.int32))

    def lengths(self) -> jax.Array:
        """Real tokens held per row."""
        return self.valid_bs.sum(-1).astype(jnp.int32)

    def as_prefix(self) -> "Prefix":
        """This cache, read-only, as a shared prefix (each of its rows read by B/P rows of a later call)."""
        return Prefix(k=self.k, v=self.v, valid_ps=self.valid_bs)

    def unstack(self) -> "KVCache":
        """The same cache with k and v as tuples of L per-layer arrays (decode loops; see __call__)."""
        return dataclasses.replace(self, k=_unstack(self.k), v=_unstack(self.v))


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Prefix:
    """A shared, read-only key/value block: row p is read by rows [p*B/P, (p+1)*B/P) of the batch."""

    k: jax.Array  # (L, P, K, S, H), or a tuple of L (P, K, S, H) arrays
    v: jax.Array
    valid_ps: jax.Array  # (P, S) bool

    @property
    def rows(self) -> int:
        return self.valid_ps.shape[0]  # P

    def lengths(self) -> jax.Array:
        return self.valid_ps.sum(-1).astype(jnp.int32)

    def unstack(self) -> "Prefix":
        return dataclasses.replace(self, k=_unstack(self.k), v=_unstack(self.v))


class PerLayer(tuple):
    """L per-layer arrays standing in for one stacked (L, ...) array."""


jax.tree_util.register_pytree_node(PerLayer, lambda x: (tuple(x), None), lambda _, xs: PerLayer(xs))


def _unstack(x):
    return x if isinstance(x, PerLayer) else PerLayer(x[i] for i in range(x.shape[0]))


def _write(buf, kv, which: int, index):
    """Writes the chunk's keys (which=0) or values (1) into a cache at slot `index`: one update of the
    stacked (L, B, K, S, H) buffer, or one per layer for per-layer buffers."""
    if isinstance(buf, PerLayer):
        return PerLayer(jax.lax.dynamic_update_slice(b, kvl[which].astype(b.dtype), (0, 0, index, 0))
                     for b, kvl in zip(buf, kv))
    new = jnp.stack([a[which] for a in kv]) if isinstance(kv, PerLayer) else kv[which]
    return jax.lax.dynamic_update_slice(buf, new.astype(buf.dtype), (0, 0, 0, index, 0))


class Linear(nnx.Module):
    """y = x @ W (+ b) with W of shape in_shape + out_shape; contracts the trailing len(in_shape) dims of x.

    The bias (Qwen2's q/k/v projections) has shape out_shape and shards like the kernel's output axes."""

    def __init__(self, in_shape, out_shape, axes, *, dtype, rngs: nnx.Rngs, bias: bool = False):
        self.in_shape, self.out_shape = tuple(in_shape), tuple(out_shape)
        fan_in = math.prod(self.in_shape)
        init = jax.random.normal(rngs.params(), self.in_shape + self.out_shape, jnp.float32)
        self.kernel = nnx.Param((init / math.sqrt(fan_in)).astype(dtype), axes=tuple(axes))
        self.bias = (nnx.Param(jnp.zeros(self.out_shape, dtype), axes=tuple(axes[len(self.in_shape):]))
                     if bias else None)

    def __call__(self, x):
        w = self.kernel[...]
        lead = x.shape[: x.ndim - len(self.in_shape)]
        y = jnp.dot(x.reshape(*lead, -1).astype(w.dtype), w.reshape(math.prod(self.in_shape), -1),
                    preferred_element_type=jnp.float32)
        if self.bias is not None:  # added to the f32 accumulator: one rounding to the weights' dtype
            y = y + self.bias[...].astype(jnp.float32).reshape(-1)
        return y.astype(w.dtype).reshape(*lead, *self.out_shape)


class RMSNorm(nnx.Module):
    def __init__(self, dim: int, eps: float, axes, *, dtype):
        self.eps = eps
        self.scale = nnx.Param(jnp.ones((dim,), dtype), axes=tuple(axes))

    def __call__(self, x):
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        # HF multiplies in the input dtype after normalising in f32; keep that order for parity.
        return self.scale[...] * y.astype(x.dtype)


def rope_inv_freq(cfg: ModelConfig) -> np.ndarray:
    """Rotary inverse frequencies (f32, as HF computes them), with Llama 3 scaling when configured."""
    h = cfg.head_dim
    inv = (1.0 / (cfg.rope_theta ** (np.arange(0, h, 2, dtype=np.int64).astype(np.float32) / h))).astype(np.float32)
    sc = cfg.rope_scaling_dict
    if sc:
        factor, low, high = sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"]
        old_ctx = sc["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > old_ctx / low, inv / factor, inv)
        smooth = (old_ctx / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old_ctx / high) & (wavelen <= old_ctx / low)
        inv = np.where(medium, smoothed, scaled).astype(np.float32)
    return inv


def apply_rope(x_btnh, positions_bt, inv_freq):
    """Rotate-half rotary embedding (HF layout: the two halves of each head are the pair)."""
    freqs = positions_bt.astype(jnp.float32)[..., None] * inv_freq  # (B, T, H/2)
    emb = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]
    cos, sin = jnp.cos(emb), jnp.sin(emb)
    x1, x2 = jnp.split(x_btnh, 2, axis=-1)
    rotated = jnp.concatenate([-x2, x1], axis=-1)
    out = x_btnh.astype(jnp.float32) * cos + rotated.astype(jnp.float32) * sin
    return out.astype(x_btnh.dtype)


# ---------------------------------------------------------------------------------------------
# Attention arithmetic: the only copy in the project.

def _attend_parts(parts):
    """One softmax over several key blocks. parts: (scores_bkgts, v_bksh, mask broadcastable to scores).

    Running max and sum across the blocks: the result equals softmax over their concatenation."""
    scores = [jnp.where(m, s, _MASK_VALUE) for s, _, m in parts]
    mx = functools.reduce(jnp.maximum, [jnp.max(s, axis=-1, keepdims=True) for s in scores])
    exps = [jnp.exp(s - mx) for s in scores]
    inv = 1.0 / functools.reduce(jnp.add, [jnp.sum(e, axis=-1, keepdims=True) for e in exps])
    return exps, inv


def attention(q_btnh, k_bksh, v_bksh, mask_bts, prefixes=(), cached=None, *, impl: str = "plain",
              chunk: int = 512):
    """Grouped-query attention of a chunk's queries over its own keys, a cache and shared prefixes.

    q (B, T, N, H); the chunk's keys/values (B, K, T, H) with mask (B, T, T); cached: the row's
    earlier keys (k (B, K, S, H), v, mask (B, S)) or None; prefixes: per-layer tuples
    (k (P, K, Sp, H), v, valid (P, Sp)), prefix p read by rows [p*B/P, (p+1)*B/P). Returns (B, T, N, H).
    """
    b, t, n, h = q_btnh.shape
    kh = k_bksh.shape[1]
    g = n // kh
    plain = not prefixes and cached is None
    if plain and impl in ("xla", "cudnn"):
        # Fused kernel (cuDNN flash attention on GPU); the mask covers padding and causality. A
        # query row with no real key (left padding) becomes a uniform average: finite, and unused.
        return jax.nn.dot_product_attention(q_btnh, k_bksh.transpose(0, 2, 1, 3).astype(q_btnh.dtype),
                                            v_bksh.transpose(0, 2, 1, 3).astype(q_btnh.dtype),
                                            mask=mask_bts[:, None], implementation=impl)
    if plain and impl == "chunked" and t > chunk:
        return _chunked_attention(q_btnh, k_bksh, v_bksh, mask_bts, chunk)
    scale = 1.0 / math.sqrt(h)
    f32 = jnp.float32
    # Every matmul is a plain batched (batch..., M, K) x (batch..., K, N): the form every backend
    # lowers well (XLA:CPU has no bf16 kernel for dots with scattered batch and free dimensions).
    q = q_btnh.reshape(b, t, kh, g, h).transpose(0, 2, 3, 1, 4).reshape(b, kh, g * t, h)  # (B, K, G*T, H)
    own = [(k_bksh, v_bksh, mask_bts)] + ([] if cached is None else [(cached[0], cached[1], cached[2][:, None, :])])
    parts = []
    for kk, vv, mm in own:
        sc = jnp.einsum("bkqh,bksh->bkqs", q, kk.astype(q.dtype), preferred_element_type=f32) * scale
        parts.append((sc.reshape(b, kh, g, t, -1), vv, mm[:, None, None]))
    for pk, pv, pvalid in prefixes:
        p = pk.shape[0]
        r = b // p
        qp = q.reshape(p, r, kh, g * t, h).transpose(0, 2, 1, 3, 4).reshape(p, kh, r * g * t, h)
        sc = jnp.einsum("pkqh,pksh->pkqs", qp, pk.astype(q.dtype), preferred_element_type=f32) * scale
        sc = sc.reshape(p, kh, r, g, t, -1).transpose(0, 2, 1, 3, 4, 5).reshape(b, kh, g, t, -1)
        parts.append((sc, pv, jnp.repeat(pvalid, r, axis=0)[:, None, None, None]))
    exps, inv = _attend_parts(parts)
    out = None
    for (_, vv, _), e in zip(parts, exps):
        pr = (e * inv).astype(vv.dtype)
        if vv.shape[0] == b:
            o = jnp.einsum("bkqs,bksh->bkqh", pr.reshape(b, kh, g * t, -1), vv, preferred_element_type=f32)
        else:
            p = vv.shape[0]
            r = b // p
            pp = pr.reshape(p, r, kh, g * t, -1).transpose(0, 2, 1, 3, 4).reshape(p, kh, r * g * t, -1)
            o = jnp.einsum("pkqs,pksh->pkqh", pp, vv, preferred_element_type=f32)
            o = o.reshape(p, kh, r, g * t, h).transpose(0, 2, 1, 3, 4).reshape(b, kh, g * t, h)
        out = o if out is None else out + o
    out = out.reshape(b, kh, g, t, h).transpose(0, 3, 1, 2, 4).reshape(b, t, n, h)
    return out.astype(q_btnh.dtype)


def _chunked_attention(q_btnh, k_bksh, v_bksh, mask_bts, chunk):
    """Queries in blocks of `chunk` (each block rematerialised in backward): (B, N, chunk, S) scores at a time."""
    b, t, n, h = q_btnh.shape
    pad = -t % chunk
    q = jnp.pad(q_btnh, ((0, 0), (0, pad), (0, 0), (0, 0)))
    m = jnp.pad(mask_bts, ((0, 0), (0, pad), (0, 0)))
    nb = (t + pad) // chunk
    qs = q.reshape(b, nb, chunk, n, h).swapaxes(0, 1)
    ms = m.reshape(b, nb, chunk, -1).swapaxes(0, 1)

    @jax.checkpoint
    def one(args):
        qc, mc = args
        return attention(qc, k_bksh, v_bksh, mc, impl="plain")

    out = jax.lax.map(one, (qs, ms))  # (nb, B, chunk, N, H)
    return out.swapaxes(0, 1).reshape(b, t + pad, n, h)[:, :t]


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, dtype, rngs: nnx.Rngs):
        d, n, k, h = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.qk_norm = cfg.qk_norm
        bias = cfg.qkv_bias
        self.q_proj = Linear((d,), (n, h), ("embed", "heads", "head_dim"), dtype=dtype, rngs=rngs, bias=bias)
        self.k_proj = Linear((d,), (k, h), ("embed", "kv_heads", "head_dim"), dtype=dtype, rngs=rngs, bias=bias)
        self.v_proj = Linear((d,), (k, h), ("embed", "kv_heads", "head_dim"), dtype=dtype, rngs=rngs, bias=bias)
        self.o_proj = Linear((n, h), (d,), ("heads", "head_dim", "embed"), dtype=dtype, rngs=rngs)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(h, cfg.rms_norm_eps, ("head_dim",), dtype=dtype)
            self.k_norm = RMSNorm(h, cfg.rms_norm_eps, ("head_dim",), dtype=dtype)

    def __call__(self, x_btd, positions_bt, inv_freq, mask_btt, cached=None, prefixes=(), *, impl="plain",
                 chunk=512, write_at=None):
        """Returns (output (B, T, D), the chunk's own keys and values (B, K, T, H) each, for a cache).

        With `write_at` (a decode step over a per-layer cache), the chunk's keys and values are first
        written into the cache at that slot and attention reads the cache alone (its mask, cached[2],
        then covers the new slot): one key block instead of two, and no second write after the layers.
        The updated cache buffers are returned in place of the chunk's keys and values."""
        q = self.q_proj(x_btd)  # (B, T, N, H)
        k = self.k_proj(x_btd)  # (B, T, K, H)
        v = self.v_proj(x_btd)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rope(q, positions_bt, inv_freq)
        k = apply_rope(k, positions_bt, inv_freq).transpose(0, 2, 1, 3)  # (B, K, T, H)
        v = v.transpose(0, 2, 1, 3)
        if write_at is not None:
            ck, cv, cmask = cached
            k = jax.lax.dynamic_update_slice(ck, k.astype(ck.dtype), (0, 0, write_at, 0))
            v = jax.lax.dynamic_update_slice(cv, v.astype(cv.dtype), (0, 0, write_at, 0))
            out = attention(q, k, v, cmask[:, None, :], prefixes, None, impl="plain")
        else:
            out = attention(q, k, v, mask_btt, prefixes, cached, impl=impl, chunk=chunk)
        return self.o_proj(out), (k, v)


class MLP(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, dtype, rngs: nnx.Rngs):
        d, f = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = Linear((d,), (f,), ("embed", "mlp"), dtype=dtype, rngs=rngs)
        self.up_proj = Linear((d,), (f,), ("embed", "mlp"), dtype=dtype, rngs=rngs)
        self.down_proj = Linear((f,), (d,), ("mlp", "embed"), dtype=dtype, rngs=rngs)

    def __call__(self, x_btd):
        h = jax.nn.silu(self.gate_proj(x_btd)) * self.up_proj(x_btd)
        return self.down_proj(constrain(h, ("batch", "seq", "mlp")))


class Block(nnx.Module):
    """One decoder layer. Inside the model its parameters carry a leading L axis (stacked)."""

    def __init__(self, cfg: ModelConfig, *, dtype, rngs: nnx.Rngs):
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ("embed",), dtype=dtype)
        self.self_attn = Attention(cfg, dtype=dtype, rngs=rngs)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ("embed",), dtype=dtype)
        self.mlp = MLP(cfg, dtype=dtype, rngs=rngs)

    def __call__(self, x, positions, inv_freq, mask_btt, cached=None, prefixes=(), **attn):
        h, kv = self.self_attn(self.input_layernorm(x), positions, inv_freq, mask_btt, cached, prefixes, **attn)
        x = constrain(x + h, ("batch", "seq", "embed"))
        x = x + self.mlp(self.post_attention_layernorm(x))
        return constrain(x, ("batch", "seq", "embed")), kv


def stacked_blocks(cfg: ModelConfig, *, dtype, rngs: nnx.Rngs) -> Block:
    """L independently initialised blocks as one Block whose every variable has a leading L axis."""
    blocks = [Block(cfg, dtype=dtype, rngs=rngs) for _ in range(cfg.num_layers)]
    graphdef = nnx.graphdef(blocks[0])
    states = [nnx.state(blk) for blk in blocks]

    def stack(*vs):
        var = vs[0].replace(jnp.stack([v.get_value() for v in vs]))
        axes = vs[0].get_metadata().get("axes")
        if axes is not None:
            var.set_metadata(axes=("layers",) + tuple(axes))
        return var

    stacked = jax.tree.map(stack, *states, is_leaf=lambda x: isinstance(x, nnx.Variable))
    return nnx.merge(graphdef, stacked)


def _remat(fn, policy: str):
    if policy == "none":
        return fn
    if policy == "full":
        return jax.checkpoint(fn)
    return jax.checkpoint(fn, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)


class Embed(nnx.Module):
    def __init__(self, vocab: int, dim: int, *, dtype, rngs: nnx.Rngs):
        init = jax.random.normal(rngs.params(), (vocab, dim), jnp.float32) * 0.02
        self.embedding = nnx.Param(init.astype(dtype), axes=("vocab", "embed"))

    def __call__(self, tokens_bt):
        return jnp.take(self.embedding[...], tokens_bt, axis=0)


class Transformer(nnx.Module):
    """Decoder-only LM. Parameter names follow the HF checkpoints (q_proj, mlp.gate_proj, ...)."""

    def __init__(self, cfg: ModelConfig, *, dtype=jnp.float32, rngs: nnx.Rngs):
        self.cfg = cfg
        self.dtype = jnp.dtype(dtype)
        self.embed_tokens = Embed(cfg.vocab_size, cfg.hidden_size, dtype=dtype, rngs=rngs)
        self.layers = stacked_blocks(cfg, dtype=dtype, rngs=rngs)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ("embed",), dtype=dtype)
        if not cfg.tie_word_embeddings:
            self.lm_head = Linear((cfg.hidden_size,), (cfg.vocab_size,), ("embed", "vocab"),
                                  dtype=dtype, rngs=rngs)

    def configure(self, **runtime) -> "Transformer":
        """Sets how the forward runs (scan_layers, remat, attention, attention_chunk); returns self."""
        from rubric_jax.models.config import RUNTIME_FIELDS

        unknown = set(runtime) - set(RUNTIME_FIELDS)
        if unknown:
            raise ValueError(f"unknown runtime options {sorted(unknown)}; choose from {RUNTIME_FIELDS}")
        self.cfg = self.cfg.replace(**runtime)
        return self

    def unembed_matrix(self) -> jax.Array:
        """(D, V) matrix mapping final hidden states to logits."""
        if self.cfg.tie_word_embeddings:
            return self.embed_tokens.embedding[...].T
        return self.lm_head.kernel[...]

    def logits(self, hidden_btd) -> jax.Array:
        """f32 logits from final (normed) hidden states; chunk over T upstream to bound memory."""
        w = self.unembed_matrix()
        out = jnp.dot(hidden_btd.astype(w.dtype), w, preferred_element_type=jnp.float32)
        return constrain(out, ("batch", "seq", "vocab"))

    def __call__(self, tokens_bt, positions_bt=None, *, mask_bt=None, cache: KVCache | None = None,
                 prefixes: tuple[Prefix, ...] = (), chunk_mask_btt=None, return_hidden: bool = False,
                 return_kv: bool = False, layers: tuple | None = None):
        """Returns (logits_btv f32, or final normed hidden_btd if return_hidden, new cache or None).

        Without a cache, return_kv=True returns the chunk itself as a new cache (prefill without
        attending to empty slots): its keys/values, valid where mask_bt is, index T. `layers` (from
        `unstacked_layers()`) runs the layers unrolled over per-layer weights: decode loops use it,
        with per-layer caches and prefixes (`unstack()`), so no step copies a layer out of a stack.

        chunk_mask_btt (B, T, T) replaces the causal mask among the chunk's own tokens (query t may see
        chunk key u): packed sequences and prefix trees, e.g. several judge suffixes in one row that
        all see the prefixes but not each other. Positions must then be given explicitly.
        """
        cfg = self.cfg
        tokens_bt = jnp.asarray(tokens_bt, jnp.int32)
        b, t = tokens_bt.shape
        prefixes = tuple(prefixes)
        for pf in prefixes:
            if b % pf.rows:
                raise ValueError(f"a prefix of {pf.rows} rows cannot be shared by a batch of {b} rows")
        mask_bt = jnp.ones((b, t), bool) if mask_bt is None else jnp.asarray(mask_bt, bool)
        if positions_bt is None:
            start = jnp.zeros((b,), jnp.int32)
            for pf in prefixes:
                start = start + jnp.repeat(pf.lengths(), b // pf.rows)
            if cache is not None:
                start = start + cache.lengths()
            positions_bt = start[:, None] + jnp.maximum(jnp.cumsum(mask_bt, axis=1) - 1, 0)
        inv_freq = jnp.asarray(rope_inv_freq(cfg))

        # Among the chunk's own tokens: causal unless overridden; keys restricted to real tokens.
        within = jnp.tril(jnp.ones((t, t), bool))[None] if chunk_mask_btt is None else jnp.asarray(chunk_mask_btt, bool)
        mask_btt = jnp.broadcast_to(within & mask_bt[:, None, :], (b, t, t))
        cached_mask = None
        # A one-token step over per-layer caches writes its keys into the cache before attending.
        write_first = cache is not None and t == 1 and _per_layer((cache.k, cache.v))
        if write_first:
            new_valid = jax.lax.dynamic_update_slice(cache.valid_bs, mask_bt, (0, cache.index))
            cached_mask = new_valid & (jnp.arange(cache.size) <= cache.index)[None, :]
        elif cache is not None:
            # Every real cached token before the chunk (the chunk's own keys are a separate part).
            cached_mask = cache.valid_bs & (jnp.arange(cache.size) < cache.index)[None, :]

        x = constrain(self.embed_tokens(tokens_bt).astype(self.dtype), ("batch", "seq", "embed"))
        x, kv = self._layers(x, positions_bt, inv_freq, mask_btt, cache, cached_mask, prefixes,
                             return_kv or cache is not None, layers, write_at=cache.index if write_first else None)
        x = self.norm(x)
        new_cache = None
        if cache is None and return_kv:
            k, v = (jnp.stack([a[0] for a in kv]), jnp.stack([a[1] for a in kv])) if isinstance(kv, PerLayer) else kv
            new_cache = KVCache(k=k, v=v, valid_bs=mask_bt, index=jnp.asarray(t, jnp.int32))
        elif write_first:
            new_cache = KVCache(k=PerLayer(a[0] for a in kv), v=PerLayer(a[1] for a in kv), valid_bs=new_valid,
                                index=(cache.index + 1).astype(jnp.int32))
        elif cache is not None:
            new_cache = KVCache(k=_write(cache.k, kv, 0, cache.index), v=_write(cache.v, kv, 1, cache.index),
                                valid_bs=jax.lax.dynamic_update_slice(cache.valid_bs, mask_bt, (0, cache.index)),
                                index=(cache.index + t).astype(jnp.int32))
        if return_hidden:
            return x, new_cache
        return self.logits(x), new_cache

    def unstacked_layers(self) -> tuple:
        """The layer weights as L separate states (one copy of the weights). A decode loop built on
        them (`layers=`) reads each layer in place instead of slicing the stacked weights every step."""
        _, state = nnx.split(self.layers)
        return tuple(jax.tree.map(lambda a: a[i], state) for i in range(self.cfg.num_layers))

    def _layers(self, x, positions_bt, inv_freq, mask_btt, cache, cached_mask, prefixes, keep_kv, layers=None,
                write_at=None):
        """Runs the layers: scanned over the stacked weights, or unrolled (over `layers`, per-layer
        states, when given). Returns (x, the chunk's keys and values if keep_kv: (L, B, K, T, H) each
        when scanned, else a tuple of L (k, v) pairs; with write_at, the L updated cache buffers)."""
        cfg = self.cfg
        graphdef, state = nnx.split(self.layers)
        attn = dict(impl=cfg.attention, chunk=cfg.attention_chunk)
        if write_at is not None:
            attn["write_at"] = write_at
        pvalid = tuple(pf.valid_ps for pf in prefixes)

        def layer_fn(x, layer_state, layer_cache, layer_pkv):
            layer = nnx.merge(graphdef, layer_state)
            pre = tuple((k, v, m) for (k, v), m in zip(layer_pkv, pvalid))
            cached = None if layer_cache is None else (layer_cache[0], layer_cache[1], cached_mask)
            x, kv = layer(x, positions_bt, inv_freq, mask_btt, cached, pre, **attn)
            return x, (kv if keep_kv else None)

        layer_fn = _remat(layer_fn, cfg.remat)
        caches = None if cache is None else (cache.k, cache.v)
        pkv = tuple((pf.k, pf.v) for pf in prefixes)
        if cfg.scan_layers and layers is None and not _per_layer(caches, pkv):
            # Caches and prefixes are scanned inputs (read-only slices); the chunk's new keys come out
            # as scan outputs and are written into the cache once, after the scan.
            return jax.lax.scan(lambda x, xs: layer_fn(x, *xs), x, (state, caches, pkv))
        kvs = []
        for i in range(cfg.num_layers):
            layer_state = layers[i] if layers is not None else jax.tree.map(lambda a: a[i], state)
            # Indexing a tuple of per-layer arrays takes that array as it is (no copy).
            x, kv = layer_fn(x, layer_state, jax.tree.map(lambda a: a[i], caches, is_leaf=_is_layers),
                             jax.tree.map(lambda a: a[i], pkv, is_leaf=_is_layers))
            kvs.append(kv)
        return x, (PerLayer(kvs) if keep_kv else None)


def _is_layers(x) -> bool:
    return isinstance(x, PerLayer)


def _per_layer(*trees) -> bool:
    """True when caches or prefixes hold per-layer arrays (see KVCache.unstack)."""
    found = []
    jax.tree.map(lambda a: found.append(_is_layers(a)), trees, is_leaf=_is_layers)
    return any(found)


def init_model(cfg: ModelConfig, *, dtype=jnp.float32, seed: int = 0) -> Transformer:
    """A randomly initialised model (tests, benchmarks on random weights)."""
    return Transformer(cfg, dtype=dtype, rngs=nnx.Rngs(seed))


def abstract_model(cfg: ModelConfig, *, dtype=jnp.float32) -> Transformer:
    """Shapes only, no allocation: for sizing presets and for filling with loaded weights."""
    return nnx.eval_shape(lambda: Transformer(cfg, dtype=dtype, rngs=nnx.Rngs(0)))


def param_count(model: nnx.Module) -> int:
    state = nnx.state(model, nnx.Param)
    return sum(math.prod(x.shape) for x in jax.tree.leaves(state))
