"""Grammar-constrained decoding on our own model: every finished output matches its grammar or JSON schema.

Used by RARE's local rubric writer ("RARE: Reinforcement Learning with Adaptive Rubric Evolution for
Open-Ended Generation", sample-level criterion replacement) so the frozen base model can write
replacement criteria without ever producing malformed JSON; usable for any schema-shaped output.

Why llguidance (not outlines-core): it is installed (outlines-core is not) and has no torch runtime; it
compiles a JSON schema or a Lark grammar lazily (an Earley parser over a lexer whose automata are built
on demand), so a per-request grammar with `anyOf` alternatives, `const`s and length-bounded strings
compiles in milliseconds, where outlines-core builds a full token-level automaton per schema (slow and
large for 300-character strings). Its Lark terminals also take regex intersection and negation
(`A & ~B`), which the writer needs for "this check must not say the same as that one"; and it computes
the masks of a whole batch in parallel in its Rust core.

How a call runs (host-stepped; the model only needs its forward with a KVCache):
  1. Prompts are left-padded (the sampler's `left_pad`, bucketed lengths) and prefilled once with the
     sampler's `prefill`; their keys/values become a shared read-only Prefix. Identical prompts (one
     request sampled with several seeds) are prefilled once and read by all their rows.
  2. Per step the host fills one bitmask row per active sequence from its llguidance matcher (1 bit per
     token in int32 words) and ships it to the device (B x V/32 words), where it is unpacked, applied to
     the logits and a token drawn with the row's key. Only the B token ids come back. The forward of
     those tokens is dispatched before the ids are read, so the device runs it while the host advances
     the matchers and computes the next masks.
  3. A row stops when its matcher stops (the grammar is complete, or the model drew an end-of-sequence
     id where the grammar allowed one). A row that runs out of max_new_tokens returns its prefix.
  4. The decode cache starts small and doubles when full, and the batch is compacted to fewer rows when
     at least half have stopped: attention reads only the slots in use and no step computes for
     long-finished rows. Shapes are bucketed (rows: powers of two, then multiples of 8; cache sizes:
     powers of two up to max_new_tokens), so a call compiles a handful of programs, reused afterwards.

`regrammar` lets a caller tighten a row's grammar from what it has written so far (the writer forbids a
later check to restate an earlier one): the row's matcher is rebuilt and replays the row's tokens.

Randomness is per row: row r draws step t with fold_in(key_r, t), key_r = key(seeds[r]) (or
fold_in(key(seed), r) for one int seed), so a row's text does not depend on its batch-mates, the
compaction or the cache size (up to float differences from shapes).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import logging
import weakref
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rubric_jax.models.tokenizer import Tokenizer
from rubric_jax.models.transformer import KVCache, Prefix, Transformer
from rubric_jax.padding import pow2_then_multiple
from rubric_jax.sampling.filters import sample_from_logits
from rubric_jax.sampling.sampler import left_pad, prefill

log = logging.getLogger(__name__)

# Compact JSON: no free whitespace, so a decoding's length is bounded by the schema's string limits
# (flexible whitespace would let a weak model emit blanks until max_new_tokens).
GRAMMAR_OPTIONS = {"whitespace_flexible": False}
MIN_CACHE = 128  # first decode cache size (slots); doubles when full

Spec = dict | str  # a JSON schema (dict) or an llguidance grammar (Lark text, or a grammar_from_* result)

_LLG_TOKENIZERS: "weakref.WeakKeyDictionary[Tokenizer, dict]" = weakref.WeakKeyDictionary()


def llg_tokenizer(tokenizer: Tokenizer, n_vocab: int):
    """llguidance's view of our tokenizer (~1 s to build, so cached per tokenizer and vocabulary size).

    n_vocab is the model's vocabulary (often padded past the tokenizer's): masks then cover every
    logit, and ids the tokenizer does not define are never allowed."""
    import llguidance.hf

    per = _LLG_TOKENIZERS.setdefault(tokenizer, {})
    n = max(int(n_vocab), int(tokenizer.vocab_size))
    if n not in per:
        per[n] = llguidance.hf.from_tokenizer(tokenizer.hf, n_vocab=n, eos_token=list(tokenizer.eos_ids))
    return per[n]


@functools.lru_cache(maxsize=256)
def _schema_grammar(schema_json: str, options_json: str) -> str:
    import llguidance

    return llguidance.LLMatcher.grammar_from_json_schema(schema_json, defaults=json.loads(options_json))


def grammar_of(spec: Spec, options: dict | None = None) -> str:
    """The llguidance grammar of a spec: a dict is a JSON schema, a str is already a grammar.

    Schema keys are not sorted: llguidance emits an object's properties in the order the schema lists
    them, and that order is part of the output format (e.g. a diagnosis written before the criterion)."""
    if isinstance(spec, str):
        return spec
    return _schema_grammar(json.dumps(spec), json.dumps(options if options is not None else GRAMMAR_OPTIONS,
                                                        sort_keys=True))


# Lexer fuel per token step: the writer's string terminals intersect a length bound with a word count and
# negated phrases, whose automata llguidance builds lazily; the default (200k) runs out on the first tokens of
# such a string. 5M measured at ~4 ms a token on average (40 ms at worst) on 2 CPU cores.
STEP_LEXER_FUEL = 5_000_000


def new_matcher(llt, spec: Spec, options: dict | None = None):
    import llguidance

    m = llguidance.LLMatcher(llt, grammar_of(spec, options), log_level=0,
                             limits=llguidance.LLParserLimits(step_lexer_fuel=STEP_LEXER_FUEL))
    if m.is_error():
        raise ValueError(f"grammar does not compile: {m.get_error()}")
    return m


def new_matchers(llt, specs: Sequence[Spec], options: dict | None = None) -> list:
    """One fresh LLMatcher per spec; rows sharing a grammar copy one compiled matcher."""
    first: dict[str, Any] = {}
    out = []
    for s in specs:
        g = grammar_of(s, options)
        out.append(first[g].deep_copy() if g in first else first.setdefault(g, new_matcher(llt, g)))
    return out


# ---- Lark building blocks for JSON strings ----------------------------------------------------------------------
# Regexes over the raw JSON text of a string, quotes included, for Lark terminals (`NAME: /.../`).
# Escapes are limited to \" \\ \/ \n \t (no \uXXXX), so every raw character is what it decodes to.
# "/" is escaped because it ends a Lark regex literal.

# Angle brackets never appear: they mark a prompt's placeholders, which small models otherwise copy.
_JSON_CHAR = r'([^"\\\x00-\x1f<>]|\\["\\\/nt])'
_JSON_FIRST = r'([^"\\\x00-\x1f\s<>]|\\["\\\/])'  # not blank either (see json_string_regex)
_WORD = r'([^"\\\x00-\x1f\s<>]|\\["\\\/])+'
_GAP = r'(\s|\\[nt])+'
_SEPARATOR = r'([\s\p{P}&&[^"\\\x00-\x1f]]|\\["\\\/nt])'  # whitespace or punctuation, raw or escaped


def json_string_regex(max_chars: int) -> str:
    """A JSON string of 1..max_chars characters, not starting with whitespace and without angle brackets (a
    blank string, or a copy of a prompt's "<placeholder>", is never useful)."""
    return f'"{_JSON_FIRST}{_JSON_CHAR}{{0,{max_chars - 1}}}"'


def min_words_regex(n: int) -> str:
    """The JSON strings of at least n whitespace-separated words (intersect with `json_string_regex`)."""
    if n <= 1:
        return f'"{_JSON_CHAR}*"'
    # unrolled, not {n-1,}: a counted repetition intersected with the length bound multiplies lexer states
    return '"(' + _GAP + ')?' + _WORD + (_GAP + _WORD) * (n - 1) + _JSON_CHAR + '*"'


def starts_with_words_regex(words: Sequence[str]) -> str:
    """The JSON strings that begin with the words " ".join(words) as whole words, in any case, spacing or
    punctuation (`normalise_text`'s comparison); negate it to forbid opening with a copied phrase. (A
    "contains" test would be stricter, but intersected with the length bound it costs the lexer far more
    states than a token step may use.)"""
    body = f"{_SEPARATOR}+".join("".join(_char_class(c) for c in w) for w in words)
    return f'"{_SEPARATOR}*{body}({_SEPARATOR}{_JSON_CHAR}*)?"'


def _char_class(c: str) -> str:
    variants = sorted({v for v in (c, c.lower(), c.upper(), c.title()) if len(v) == 1})
    return "[" + "".join(v if v.isascii() and v.isalnum() else f"\\x{{{ord(v):x}}}" for v in variants) + "]"


def same_words_regex(words: Sequence[str]) -> str:
    """The JSON strings whose text, lowercased with punctuation turned into spaces and whitespace
    collapsed, is " ".join(words) (words: lowercase, without whitespace or punctuation). Negate it
    (`STRING & ~/.../`) to forbid restating a text in other case, spacing or punctuation."""
    if not words:
        return f'"{_SEPARATOR}*"'
    body = f"{_SEPARATOR}+".join("".join(_char_class(c) for c in w) for w in words)
    return f'"{_SEPARATOR}*{body}{_SEPARATOR}*"'


def _bucket_rows(n: int) -> int:
    """Rows per call: powers of two up to 8, then multiples of 8 (few compiled batch shapes)."""
    return pow2_then_multiple(n, 8, 8)


@dataclasses.dataclass
class _Layout:
    prompts: list[list[int]]  # P distinct prompts (padded to a bucketed count with copies of the first)
    per_prompt: int  # k: rows p*k .. p*k+k-1 decode against prompt p (the sampler's shared-prefix layout)
    row_of: list[int]  # request i decodes on row row_of[i]
    pad_rows: list[int]  # the other rows (finished from the start)


def _row_layout(prompts: list[tuple[int, ...]]) -> _Layout:
    """Rows for a call. Identical prompts (e.g. several seeds of one request) are prefilled once and
    read as one shared prefix by all their rows, when that does not cost more rows than no sharing."""
    n = len(prompts)
    counts = collections.Counter(prompts)
    distinct, k = list(counts), max(counts.values())
    p_rows = _bucket_rows(len(distinct))
    if k == 1 or p_rows * k > _bucket_rows(n):
        distinct, k, p_rows = list(prompts), 1, _bucket_rows(n)
    if k == 1:
        row_of = list(range(n))
    else:
        index = {p: i for i, p in enumerate(distinct)}
        taken = dict.fromkeys(distinct, 0)
        row_of = []
        for p in prompts:
            row_of.append(index[p] * k + taken[p])
            taken[p] += 1
    used = set(row_of)
    padded = [list(p) for p in distinct] + [list(distinct[0])] * (p_rows - len(distinct))
    return _Layout(padded, k, row_of, [r for r in range(p_rows * k) if r not in used])


def row_keys(seed: int | Sequence[int], n: int) -> jax.Array:
    """(n,) keys, one per request: key(seed_i) for a seed list, fold_in(key(seed), i) for one int."""
    if isinstance(seed, (int, np.integer)):
        base = jax.random.key(int(seed))
        return jax.vmap(lambda r: jax.random.fold_in(base, r))(jnp.arange(n, dtype=jnp.uint32))
    seeds = [int(s) for s in seed]
    if len(seeds) != n:
        raise ValueError(f"seed: expected {n} seeds (one per prompt), got {len(seeds)}")
    return jax.vmap(jax.random.key)(jnp.asarray(seeds, jnp.uint32))


# ---- device programs --------------------------------------------------------------------------------------------

@functools.partial(jax.jit, static_argnames=("graphdef", "per_prompt"))
def _prefill_jit(graphdef, state, tokens_bt, mask_bt, per_prompt):
    return prefill(nnx.merge(graphdef, state), tokens_bt, mask_bt, per_prompt)


@functools.partial(jax.jit, static_argnames=("greedy",))
def _masked_sample_jit(logits_bv, bitmask_bw, keys, step, temperature, *, greedy):
    """Draws one token per row among the tokens its bitmask allows (bit k of word w = token 32w+k)."""
    b, v = logits_bv.shape
    bits = (bitmask_bw[:, :, None] >> jnp.arange(32, dtype=jnp.int32)) & 1
    allowed = bits.reshape(b, -1)[:, :v].astype(bool)
    masked = jnp.where(allowed, logits_bv, -jnp.inf)
    if greedy:
        return jnp.argmax(masked, axis=-1).astype(jnp.int32)
    step_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, step)
    return sample_from_logits(step_keys, masked, temperature=temperature, use_top_p=False)


@functools.partial(jax.jit, static_argnames=("graphdef",), donate_argnames=("cache",))
def _decode_jit(graphdef, state, tok_b, active_b, cache, prompts):
    model = nnx.merge(graphdef, state)
    logits, cache = model(tok_b[:, None], mask_bt=active_b[:, None], cache=cache, prefixes=(prompts,))
    return logits[:, 0], cache


@functools.partial(jax.jit, static_argnames=("size",))
def _grow_jit(cache: KVCache, size: int) -> KVCache:
    pad = size - cache.size
    kv = ((0, 0), (0, 0), (0, 0), (0, pad), (0, 0))
    return KVCache(k=jnp.pad(cache.k, kv), v=jnp.pad(cache.v, kv), valid_bs=jnp.pad(cache.valid_bs, ((0, 0), (0, pad))),
                   index=cache.index)


@functools.partial(jax.jit, static_argnames=("with_prefix",))
def _take_rows_jit(idx, logits, keys, cache: KVCache, prompts: Prefix, *, with_prefix: bool):
    cache = KVCache(k=cache.k[:, idx], v=cache.v[:, idx], valid_bs=cache.valid_bs[idx], index=cache.index)
    if with_prefix:
        prompts = Prefix(k=prompts.k[:, idx], v=prompts.v[:, idx], valid_ps=prompts.valid_ps[idx])
    return logits[idx], keys[idx], cache, prompts


# ---- the host loop ----------------------------------------------------------------------------------------------

@dataclasses.dataclass
class ConstrainedOutput:
    texts: list[str]  # decoded output per prompt (end-of-sequence ids dropped)
    tokens: list[list[int]]  # generated ids per prompt
    finished: list[bool]  # the grammar completed (False: cut by max_new_tokens, or a matcher error)
    steps: int  # decode steps run


def constrained_decode(model: Transformer, tokenizer: Tokenizer, prompts_ids: Sequence[Sequence[int]],
                       schemas: Spec | Sequence[Spec], *, max_new_tokens: int, temperature: float,
                       seed: int | Sequence[int] = 0, grammar_options: dict | None = None,
                       regrammar: Callable[[int, str], Spec | None] | None = None,
                       min_cache: int = MIN_CACHE, compact: bool = True) -> ConstrainedOutput:
    """`constrained_generate` with token ids and a finished flag per row, and the `regrammar` hook:
    called as regrammar(i, text so far) after each token of request i; a spec it returns replaces the
    row's grammar from then on (it must accept the text so far). min_cache: the decode cache's first
    size; compact=False keeps every row in the batch to the end (both only change speed)."""
    import llguidance
    import llguidance.numpy as lln

    n = len(prompts_ids)
    if n == 0:
        return ConstrainedOutput([], [], [], 0)
    specs = [schemas] * n if isinstance(schemas, (dict, str)) else list(schemas)
    if len(specs) != n:
        raise ValueError(f"{n} prompts but {len(specs)} schemas")
    if max_new_tokens < 1 or temperature < 0:
        raise ValueError(f"bad settings: max_new_tokens={max_new_tokens} temperature={temperature}")
    llt = llg_tokenizer(tokenizer, model.cfg.vocab_size)
    stop_ids = frozenset(llt.eos_tokens) | frozenset(tokenizer.eos_ids)
    matchers = new_matchers(llt, specs, grammar_options)
    layout = _row_layout([tuple(p) for p in prompts_ids])
    rows = len(layout.prompts) * layout.per_prompt
    row = np.asarray(layout.row_of)  # request i's current row
    tokens_bt, mask_bt = left_pad(layout.prompts, tokenizer.pad_id, None)
    src = np.zeros(rows, np.int32)  # padding rows reuse request 0's key: they never produce output
    src[row] = np.arange(n)
    keys = row_keys(seed, n)[src]

    graphdef, state = nnx.split(model)
    logits, prompts = _prefill_jit(graphdef, state, jnp.asarray(tokens_bt), jnp.asarray(mask_bt), layout.per_prompt)
    cache = KVCache.empty(model.cfg, rows, min(max_new_tokens, min_cache), dtype=model.dtype)
    executor = llguidance.LLExecutor()
    words = lln.allocate_token_bitmask(1, llt.vocab_size).shape[1]
    out: list[list[int]] = [[] for _ in range(n)]
    text = [bytearray() for _ in range(n)]
    finished = [False] * n
    active = list(range(n))
    greedy = temperature == 0
    step = 0
    for step in range(max_new_tokens):
        bitmask = np.full((rows, words), -1, np.int32)  # finished rows: anything (their draw is ignored)
        lln.fill_next_token_bitmask_par(executor, [(matchers[i], int(row[i])) for i in active], bitmask)
        tok = _masked_sample_jit(logits, jnp.asarray(bitmask), keys, jnp.uint32(step), jnp.float32(temperature),
                                 greedy=greedy)
        if step + 1 < max_new_tokens:
            # Dispatched before the ids are read: the forward overlaps the host's matcher work below.
            live = np.zeros(rows, bool)
            live[row[active]] = True
            logits, cache = _decode_jit(graphdef, state, tok, jnp.asarray(live), cache, prompts)
        tok_host = np.asarray(tok)
        still = []
        for i in active:
            t = int(tok_host[row[i]])
            m = matchers[i]
            if not m.consume_token(t):
                log.warning("constrained decoding: row %d left its grammar (%s); returning its prefix", i,
                            m.get_error()[:300])
                continue
            if t not in stop_ids:
                out[i].append(t)
                text[i] += llt.decode_bytes([t])
            if m.is_stopped():
                finished[i] = m.is_accepting() and not m.is_error()
                continue
            still.append(i)
            if regrammar is not None:
                new = regrammar(i, text[i].decode("utf-8", errors="replace"))
                if new is not None:
                    matchers[i] = _replay(llt, new, grammar_options, out[i], m, i)
        active = still
        if not active or step + 1 == max_new_tokens:
            break
        if step + 1 == cache.size:
            cache = _grow_jit(cache, min(2 * cache.size, max_new_tokens))
        if compact and len(active) <= rows // 2 and (layout.per_prompt == 1 or len(layout.prompts) == 1):
            logits, keys, cache, prompts, row, rows = _compact(active, row, rows, logits, keys, cache, prompts,
                                                               with_prefix=layout.per_prompt == 1)
    texts = [bytes(t).decode("utf-8", errors="replace") for t in text]
    return ConstrainedOutput(texts=texts, tokens=out, finished=finished, steps=step + 1)


def _replay(llt, spec: Spec, options, tokens: list[int], old, i: int):
    """A matcher for the new grammar, advanced over the row's tokens (the old one if they do not fit)."""
    new = new_matcher(llt, spec, options)
    if new.consume_tokens(tokens) and not new.is_error():
        return new
    log.warning("constrained decoding: row %d: the new grammar rejects its text so far (%s); keeping the old one",
                i, new.get_error()[:300])
    return old


def _compact(active, row, rows, logits, keys, cache, prompts, *, with_prefix):
    """Moves the active requests onto the first rows of a smaller batch (bucketed)."""
    new_rows = _bucket_rows(len(active))
    take = np.full(new_rows, row[active[0]], np.int32)  # padding rows copy an active row; they are masked
    take[:len(active)] = row[active]
    row = row.copy()
    row[active] = np.arange(len(active))
    logits, keys, cache, prompts = _take_rows_jit(jnp.asarray(take), logits, keys, cache, prompts,
                                                  with_prefix=with_prefix)
    return logits, keys, cache, prompts, row, new_rows


def constrained_generate(model: Transformer, tokenizer: Tokenizer, prompts_ids: Sequence[Sequence[int]],
                         schemas: Spec | Sequence[Spec], *, max_new_tokens: int, temperature: float,
                         seed: int | Sequence[int] = 0, grammar_options: dict | None = None) -> list[str]:
    """Samples one continuation per prompt (token ids, chat template already applied) that matches that
    row's JSON schema (a dict) or llguidance grammar (a str); one spec for all rows or one per row.

    temperature 0 is greedy within the grammar. seed: one int for the call (row r uses fold_in(key, r))
    or one int per row. A row cut by max_new_tokens before its grammar completes returns the prefix it
    has (so it will not parse); every other row's text is a complete match of its schema.
    """
    return constrained_decode(model, tokenizer, prompts_ids, schemas, max_new_tokens=max_new_tokens,
                              temperature=temperature, seed=seed, grammar_options=grammar_options).texts


__all__ = ["GRAMMAR_OPTIONS", "ConstrainedOutput", "constrained_decode", "constrained_generate", "grammar_of",
           "json_string_regex", "llg_tokenizer", "new_matcher", "new_matchers", "row_keys", "same_words_regex"]
