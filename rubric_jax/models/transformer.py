"""Qwen3 / Llama decoder in Flax NNX.

One forward serves every caller:
  training            tokens (B, T), no cache                      -> logits (B, T, V)
  prefill             tokens (B, T), empty cache                   -> logits, cache holding T slots
  decode              tokens (B, 1), cache                         -> logits, cache + 1 slot
  chunked scoring     tokens (B, T), cache holding a shared prefix  -> logits of the chunk, cache

Left padding is expressed by `mask_bt` (True = real token). Cache slots remember which of them hold
real tokens, so padded prompts and ragged continuations attend only to what is real. The model knows
nothing of training: LoRA wraps `Linear` modules from outside (rubric_jax.models.lora), sharding is
read from each parameter's logical `axes` (rubric_jax.models.sharding).

Shape letters (DESIGN.md section 2): B batch, T chunk length, S cache length, D model dim, N query
heads, K kv heads, H head dim, F MLP hidden, V vocab.
"""

from __future__ import annotations

import dataclasses
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
    """Per-layer keys/values plus which slots are real tokens and where the next chunk goes."""

    # Heads before slots, so both attention matmuls batch over (B, K) with no transpose of the cache.
    k: tuple[jax.Array, ...]  # L x (B, K, S, H)
    v: tuple[jax.Array, ...]  # L x (B, K, S, H)
    valid_bs: jax.Array  # (B, S) bool: slot holds a real (non-pad) token
    index: jax.Array  # () int32: next slot to write

    @property
    def size(self) -> int:
        return self.valid_bs.shape[1]  # S

    @classmethod
    def empty(cls, cfg: ModelConfig, batch: int, size: int, dtype=jnp.float32) -> "KVCache":
        shape = (batch, cfg.num_kv_heads, size, cfg.head_dim)
        zeros = tuple(jnp.zeros(shape, dtype) for _ in range(cfg.num_layers))
        return cls(k=zeros, v=tuple(jnp.zeros(shape, dtype) for _ in range(cfg.num_layers)),
                   valid_bs=jnp.zeros((batch, size), bool), index=jnp.zeros((), jnp.int32))

    def lengths(self) -> jax.Array:
        """Real tokens held per row, i.e. the next rotary position of each row."""
        return self.valid_bs.sum(-1).astype(jnp.int32)

    def repeat(self, n: int) -> "KVCache":
        """Each row repeated n times (b0, b0, ..., b1, ...): G samples from one prefilled prompt."""
        rep = lambda x: jnp.repeat(x, n, axis=0)
        return KVCache(k=tuple(map(rep, self.k)), v=tuple(map(rep, self.v)),
                       valid_bs=rep(self.valid_bs), index=self.index)

    def take(self, rows: jax.Array) -> "KVCache":
        """Rows gathered by index: several continuations scored against shared prefixes."""
        tk = lambda x: jnp.take(x, rows, axis=0)
        return KVCache(k=tuple(map(tk, self.k)), v=tuple(map(tk, self.v)),
                       valid_bs=tk(self.valid_bs), index=self.index)


class Linear(nnx.Module):
    """y = x @ W with W of shape in_shape + out_shape; contracts the trailing len(in_shape) dims of x."""

    def __init__(self, in_shape, out_shape, axes, *, dtype, rngs: nnx.Rngs):
        self.in_shape, self.out_shape = tuple(in_shape), tuple(out_shape)
        fan_in = math.prod(self.in_shape)
        init = jax.random.normal(rngs.params(), self.in_shape + self.out_shape, jnp.float32)
        self.kernel = nnx.Param((init / math.sqrt(fan_in)).astype(dtype), axes=tuple(axes))

    def __call__(self, x):
        w = self.kernel[...]
        lead = x.shape[: x.ndim - len(self.in_shape)]
        y = jnp.dot(x.reshape(*lead, -1).astype(w.dtype), w.reshape(math.prod(self.in_shape), -1),
                    preferred_element_type=jnp.float32)
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


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, dtype, rngs: nnx.Rngs):
        d, n, k, h = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.cfg = cfg
        self.q_proj = Linear((d,), (n, h), ("embed", "heads", "head_dim"), dtype=dtype, rngs=rngs)
        self.k_proj = Linear((d,), (k, h), ("embed", "kv_heads", "head_dim"), dtype=dtype, rngs=rngs)
        self.v_proj = Linear((d,), (k, h), ("embed", "kv_heads", "head_dim"), dtype=dtype, rngs=rngs)
        self.o_proj = Linear((n, h), (d,), ("heads", "head_dim", "embed"), dtype=dtype, rngs=rngs)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(h, cfg.rms_norm_eps, ("head_dim",), dtype=dtype)
            self.k_norm = RMSNorm(h, cfg.rms_norm_eps, ("head_dim",), dtype=dtype)

    def __call__(self, x_btd, positions_bt, inv_freq, mask_bts, kv=None, index=None):
        """Attends the chunk's queries to the cache (if given, after writing the chunk into it)."""
        q = self.q_proj(x_btd)  # (B, T, N, H)
        k = self.k_proj(x_btd)  # (B, T, K, H)
        v = self.v_proj(x_btd)
        if self.cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rope(q, positions_bt, inv_freq)
        k = apply_rope(k, positions_bt, inv_freq)
        k = k.transpose(0, 2, 1, 3)  # (B, K, T, H)
        v = v.transpose(0, 2, 1, 3)
        if kv is not None:
            ck, cv = kv
            k = jax.lax.dynamic_update_slice(ck, k.astype(ck.dtype), (0, 0, index, 0))
            v = jax.lax.dynamic_update_slice(cv, v.astype(cv.dtype), (0, 0, index, 0))
            kv = (k, v)
        b, t, n, h = q.shape
        kh = k.shape[1]
        # Grouped-query: each kv head serves n/kh query heads, folded into the query-row axis.
        q = q.reshape(b, t, kh, n // kh, h).transpose(0, 2, 3, 1, 4).reshape(b, kh, (n // kh) * t, h)
        scores = jnp.einsum("bkqh,bksh->bkqs", q, k.astype(q.dtype),
                            preferred_element_type=jnp.float32) / math.sqrt(h)
        scores = scores.reshape(b, kh, n // kh, t, -1)
        scores = jnp.where(mask_bts[:, None, None], scores, _MASK_VALUE)
        probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype).reshape(b, kh, (n // kh) * t, -1)
        out = jnp.einsum("bkqs,bksh->bkqh", probs, v, preferred_element_type=jnp.float32)
        out = out.reshape(b, kh, n // kh, t, h).transpose(0, 3, 1, 2, 4).reshape(b, t, n, h).astype(x_btd.dtype)
        return self.o_proj(out), kv


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
    def __init__(self, cfg: ModelConfig, *, dtype, rngs: nnx.Rngs):
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ("embed",), dtype=dtype)
        self.self_attn = Attention(cfg, dtype=dtype, rngs=rngs)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ("embed",), dtype=dtype)
        self.mlp = MLP(cfg, dtype=dtype, rngs=rngs)

    def __call__(self, x, positions, inv_freq, mask_bts, kv=None, index=None):
        h, kv = self.self_attn(self.input_layernorm(x), positions, inv_freq, mask_bts, kv, index)
        x = constrain(x + h, ("batch", "seq", "embed"))
        x = x + self.mlp(self.post_attention_layernorm(x))
        return constrain(x, ("batch", "seq", "embed")), kv


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
        self.layers = nnx.List([Block(cfg, dtype=dtype, rngs=rngs) for _ in range(cfg.num_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ("embed",), dtype=dtype)
        if not cfg.tie_word_embeddings:
            self.lm_head = Linear((cfg.hidden_size,), (cfg.vocab_size,), ("embed", "vocab"),
                                  dtype=dtype, rngs=rngs)

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
                 chunk_mask_btt=None, return_hidden: bool = False):
        """Returns (logits_btv f32, or final hidden_btd if return_hidden, new cache or None).

        chunk_mask_btt (B, T, T) replaces the causal mask among the chunk's own tokens (query t may see
        chunk key u): packed sequences and prefix trees, e.g. several judge suffixes in one row that
        all see the cached prefix but not each other. Positions must then be given explicitly.
        """
        tokens_bt = jnp.asarray(tokens_bt, jnp.int32)
        b, t = tokens_bt.shape
        mask_bt = jnp.ones((b, t), bool) if mask_bt is None else jnp.asarray(mask_bt, bool)
        if positions_bt is None:
            start = cache.lengths()[:, None] if cache is not None else 0
            positions_bt = start + jnp.maximum(jnp.cumsum(mask_bt, axis=1) - 1, 0)
        inv_freq = jnp.asarray(rope_inv_freq(self.cfg))

        # Among the chunk's own tokens: causal unless overridden; keys restricted to real tokens.
        within = jnp.tril(jnp.ones((t, t), bool))[None] if chunk_mask_btt is None else jnp.asarray(chunk_mask_btt, bool)
        within = within & mask_bt[:, None, :]
        if cache is None:
            mask_bts = within
            index = None
        else:
            index = cache.index
            valid_bs = jax.lax.dynamic_update_slice(cache.valid_bs, mask_bt, (0, index))
            # Every real cached token before the chunk, plus the chunk's own keys at [index, index + T).
            before = cache.valid_bs & (jnp.arange(cache.size) < index)[None, :]
            placed = jax.lax.dynamic_update_slice(jnp.zeros((b, t, cache.size), bool),
                                                  jnp.broadcast_to(within, (b, t, t)), (0, 0, index))
            mask_bts = before[:, None, :] | placed

        x = constrain(self.embed_tokens(tokens_bt).astype(self.dtype), ("batch", "seq", "embed"))
        new_k, new_v = [], []
        for i, layer in enumerate(self.layers):
            kv = (cache.k[i], cache.v[i]) if cache is not None else None
            x, kv = layer(x, positions_bt, inv_freq, mask_bts, kv, index)
            if kv is not None:
                new_k.append(kv[0])
                new_v.append(kv[1])
        x = self.norm(x)
        new_cache = None
        if cache is not None:
            new_cache = KVCache(k=tuple(new_k), v=tuple(new_v), valid_bs=valid_bs,
                                index=(index + t).astype(jnp.int32))
        if return_hidden:
            return x, new_cache
        return self.logits(x), new_cache


def init_model(cfg: ModelConfig, *, dtype=jnp.float32, seed: int = 0) -> Transformer:
    """A randomly initialised model (tests, benchmarks on random weights)."""
    return Transformer(cfg, dtype=dtype, rngs=nnx.Rngs(seed))


def abstract_model(cfg: ModelConfig, *, dtype=jnp.float32) -> Transformer:
    """Shapes only, no allocation: for sizing presets and for filling with loaded weights."""
    return nnx.eval_shape(lambda: Transformer(cfg, dtype=dtype, rngs=nnx.Rngs(0)))


def param_count(model: nnx.Module) -> int:
    state = nnx.state(model, nnx.Param)
    return sum(math.prod(x.shape) for x in jax.tree.leaves(state))
