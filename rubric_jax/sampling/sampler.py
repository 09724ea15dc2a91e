"""KV-cache sampler: one prefill per prompt, G samples decoded against it as a shared prefix.

Prompts are left-padded to a bucketed length (bounded compilations). The prompt batch (B) is prefilled
once; its keys/values become a shared prefix that the B*G decoding rows read (each prompt's G rows
read the same block: no per-sample copy of the prompt cache), while each row's own cache holds only
its generated tokens. Decoding runs in a
`lax.while_loop` that stops when every row has emitted an end-of-sequence id or after max_new_tokens.
Per token it records the sampled id, its log-probability and the entropy of the sampling distribution
(temperature-scaled, before top-k/top-p/min-p filtering: the policy that GRPO's ratio refers to).

Randomness is per prompt: prompt b has a key k_b (given as `prompt_keys`, or fold_in(key, b) from `seed`);
row b*G + g draws its token at decode step t with fold_in(fold_in(k_b, g), t). So a prompt's samples
depend only on its key, its own logits and G, never on which other prompts share the batch (up to
floating-point differences in the model's logits from the batch's padded shape).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rubric_jax.errors import UserError
from rubric_jax.models.transformer import KVCache, Transformer
from rubric_jax.padding import pow2_then_multiple
from rubric_jax.sampling.filters import logprob_and_entropy, sample_from_logits


@dataclasses.dataclass
class SampleOutput:
    tokens: np.ndarray  # (B*G, max_new) int32, pad_id after the end
    lengths: np.ndarray  # (B*G,) tokens generated, the end-of-sequence id included
    logprobs: np.ndarray  # (B*G, max_new) f32, 0 past the end
    entropy: np.ndarray  # (B*G, max_new) f32, 0 past the end
    prompt_tokens: np.ndarray  # (B, Tp) left-padded
    prompt_mask: np.ndarray  # (B, Tp) bool
    num_samples: int  # G; row b*G + g is sample g of prompt b

    def completion_mask(self) -> np.ndarray:
        return np.arange(self.tokens.shape[1])[None, :] < self.lengths[:, None]

    def completions(self) -> list[list[int]]:
        return [row[:n].tolist() for row, n in zip(self.tokens, self.lengths)]


def bucket_length(n: int, minimum: int = 16) -> int:
    """Next power of two up to 512, then multiples of 256: few distinct prompt shapes to compile."""
    return pow2_then_multiple(max(n, minimum), 512, 256)


def left_pad(prompt_ids: Sequence[Sequence[int]], pad_id: int, length: int | None = None):
    """(tokens (B, T), mask (B, T)) with each prompt right-aligned; T bucketed unless given."""
    if not prompt_ids or any(len(p) == 0 for p in prompt_ids):
        raise ValueError("every prompt needs at least one token")
    longest = max(len(p) for p in prompt_ids)
    t = length if length is not None else bucket_length(longest)
    if longest > t:
        raise ValueError(f"prompt of {longest} tokens exceeds the padded length {t}")
    tokens = np.full((len(prompt_ids), t), pad_id, np.int32)
    mask = np.zeros((len(prompt_ids), t), bool)
    for i, p in enumerate(prompt_ids):
        tokens[i, t - len(p):] = p
        mask[i, t - len(p):] = True
    return tokens, mask


def prefill(model: Transformer, tokens_bt, mask_bt, num_samples: int = 1):
    """Runs the prompts once; returns (last-position logits (B*G, V), the prompts as a shared Prefix)."""
    hidden, cache = model(tokens_bt, mask_bt=mask_bt, return_hidden=True, return_kv=True)
    # Left padding puts every prompt's last real token at the final position; only it needs logits.
    logits = model.logits(hidden[:, -1:])[:, 0]
    return jnp.repeat(logits, num_samples, axis=0), cache.as_prefix()


@functools.partial(jax.jit, static_argnames=("graphdef", "max_new_tokens", "num_samples", "top_k", "use_top_p",
                                             "greedy", "eos_ids", "pad_id"))
def _sample_jit(graphdef, state, tokens_bt, mask_bt, prompt_keys, temperature, top_p, min_p, *, max_new_tokens,
                num_samples, top_k, use_top_p, greedy, eos_ids, pad_id):
    model = nnx.merge(graphdef, state)
    with jax.named_scope("sample/prefill"):
        logits, prompts = prefill(model, tokens_bt, mask_bt, num_samples)
    rows = logits.shape[0]
    # Row b*G + g: fold_in(prompt key b, g) (the order of jnp.repeat in prefill).
    samples = jnp.arange(num_samples, dtype=jnp.uint32)
    row_keys = jax.vmap(lambda k: jax.vmap(lambda g: jax.random.fold_in(k, g))(samples))(prompt_keys).reshape(rows)
    # The loop reads per-layer weights, prompt keys and caches: slicing a stacked (L, ...) array
    # inside the loop would copy a layer of weights every step on backends that cannot alias slices.
    layers = model.unstacked_layers()
    prompts = prompts.unstack()
    cache = KVCache.empty(model.cfg, rows, max_new_tokens, dtype=model.dtype).unstack()
    eos = jnp.asarray(eos_ids, jnp.int32)

    def cond(carry):
        step, _, _, done, *_ = carry
        return (step < max_new_tokens) & ~jnp.all(done)

    def body(carry):
        step, cache, logits, done, toks, logps, ents = carry
        if greedy:  # static: no random draw over the vocabulary at all
            tok = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        else:
            step_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(row_keys, step)
            tok = sample_from_logits(step_keys, logits, temperature=temperature, top_k=top_k, top_p=top_p,
                                     min_p=min_p, use_top_p=use_top_p)
        logp, ent = logprob_and_entropy(logits, tok, temperature)
        tok = jnp.where(done, pad_id, tok)
        toks = toks.at[:, step].set(tok)
        logps = logps.at[:, step].set(jnp.where(done, 0.0, logp))
        ents = ents.at[:, step].set(jnp.where(done, 0.0, ent))
        new_done = done | jnp.isin(tok, eos)
        m = nnx.merge(graphdef, state)
        with jax.named_scope("sample/decode"):
            next_logits, cache = m(tok[:, None], mask_bt=~done[:, None], cache=cache, prefixes=(prompts,),
                                   layers=layers)
        return step + 1, cache, next_logits[:, 0], new_done, toks, logps, ents

    init = (jnp.zeros((), jnp.int32), cache, logits, jnp.zeros((rows,), bool),
            jnp.full((rows, max_new_tokens), pad_id, jnp.int32),
            jnp.zeros((rows, max_new_tokens), jnp.float32), jnp.zeros((rows, max_new_tokens), jnp.float32))
    step, _, _, done, toks, logps, ents = jax.lax.while_loop(cond, body, init)
    # A row's length counts its tokens up to and including the first end-of-sequence id.
    is_eos = jnp.isin(toks, eos)
    first_eos = jnp.where(is_eos.any(-1), jnp.argmax(is_eos, axis=-1) + 1, step)
    return toks, first_eos.astype(jnp.int32), logps, ents


def _as_key(k) -> jax.Array:
    """A typed PRNG key (array) from a typed key or raw uint32 key data."""
    k = jnp.asarray(k)
    return k if jax.dtypes.issubdtype(k.dtype, jax.dtypes.prng_key) else jax.random.wrap_key_data(k)


def prompt_keys_for(seed: int | jax.Array, num_prompts: int) -> jax.Array:
    """The per-prompt keys `sample` uses for `seed`: fold_in(key, b) for prompt b, key = seed if it is a
    key, else jax.random.key(seed). Shape (num_prompts,)."""
    key = _as_key(seed) if isinstance(seed, jax.Array) else jax.random.key(seed)
    if key.shape != ():
        raise ValueError(f"seed: expected an int or a single PRNG key, got a key array of shape {key.shape}")
    return jax.vmap(lambda b: jax.random.fold_in(key, b))(jnp.arange(num_prompts, dtype=jnp.uint32))


def check_settings(*, max_new_tokens: int, num_samples: int = 1, temperature: float = 1.0, top_k: int = 0,
                   top_p: float = 1.0, min_p: float = 0.0) -> None:
    """Raises UserError naming the first setting `sample` cannot run; callers check before loading a model."""
    def bad(name, value, allowed):
        raise UserError(f"{name}={value}: must be {allowed}")

    def integer(v) -> int | None:
        try:
            return None if isinstance(v, bool) else operator.index(v)
        except TypeError:
            return None

    for name, v, lo in (("max_new_tokens", max_new_tokens, 1), ("num_samples", num_samples, 1), ("top_k", top_k, 0)):
        i = integer(v)
        if i is None or i < lo:
            bad(name, v, f"an integer >= {lo}" + (" (0 = no top-k filter)" if name == "top_k" else ""))
    for name, v, ok, allowed in (("temperature", temperature, lambda t: t >= 0, ">= 0 (0 = greedy)"),
                                 ("top_p", top_p, lambda p: 0 < p <= 1, "in (0, 1]"),
                                 ("min_p", min_p, lambda p: 0 <= p <= 1, "in [0, 1]")):
        if not math.isfinite(v) or not ok(v):
            bad(name, v, allowed)


def sample(model: Transformer, prompt_ids: Sequence[Sequence[int]], *, max_new_tokens: int, num_samples: int = 1,
           temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0,
           eos_ids: Sequence[int], pad_id: int, seed: int | jax.Array = 0, prompt_keys: jax.Array | None = None,
           prompt_length: int | None = None) -> SampleOutput:
    """Samples num_samples continuations of each prompt (token ids, no chat template applied here).

    Randomness: `prompt_keys`, a key array of shape (B,) (typed, or raw uint32 data of shape (B, 2)), gives
    prompt b its key; without it, prompt b's key is fold_in(seed's key, b) (`prompt_keys_for`), where
    `seed` is an int or a single PRNG key. Row b*G + g depends only on prompt b's key, g and the prompt, so
    a caller that splits a batch over processes gets the same samples by passing keys derived from each
    prompt's global index.
    """
    check_settings(max_new_tokens=max_new_tokens, num_samples=num_samples, temperature=temperature, top_k=top_k,
                   top_p=top_p, min_p=min_p)
    tokens, mask = left_pad(prompt_ids, pad_id, prompt_length)
    if prompt_keys is None:
        keys = prompt_keys_for(seed, len(prompt_ids))
    else:
        keys = _as_key(prompt_keys)
        if keys.shape != (len(prompt_ids),):
            raise ValueError(f"prompt_keys: expected {len(prompt_ids)} keys (one per prompt), got shape {keys.shape}")
    graphdef, state = nnx.split(model)
    toks, lengths, logps, ents = _sample_jit(
        graphdef, state, jnp.asarray(tokens), jnp.asarray(mask), keys, jnp.float32(temperature),
        jnp.float32(top_p), jnp.float32(min_p), max_new_tokens=max_new_tokens, num_samples=num_samples,
        top_k=int(top_k), use_top_p=top_p < 1.0, greedy=temperature == 0, eos_ids=tuple(int(e) for e in eos_ids), pad_id=int(pad_id))
    return SampleOutput(tokens=np.asarray(toks), lengths=np.asarray(lengths), logprobs=np.asarray(logps),
                        entropy=np.asarray(ents), prompt_tokens=tokens, prompt_mask=mask, num_samples=num_samples)
