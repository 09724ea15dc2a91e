"""Batched answer generation with an on-disk cache.

Each answer is keyed by (model fingerprint, prompt text, seed, generation settings): a rerun, or a run that
adds a model, samples nothing that is already on disk, and a retrained model (new weights, new fingerprint)
never gets stale answers. Sampling goes through `rubric_jax.sampling.sample` with the tokenizer's chat
template; prompts are sorted by length and batched into fixed-size batches whose prompt width is bucketed
(`bucket_length`), so each bucket compiles once. Each prompt samples with its own key, derived from
(seed, prompt text), so an answer does not depend on which other prompts share its batch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import re
from typing import Sequence

import numpy as np

from rubric_jax.sampling.sampler import bucket_length, sample  # `sample` is looked up at call time (tests count calls)


@dataclasses.dataclass(frozen=True)
class GenSettings:
    max_new_tokens: int = 256
    temperature: float = 0.7
    top_k: int = 20
    top_p: float = 0.8
    min_p: float = 0.0
    system: str | None = None

    def key(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_args(cls, args) -> "GenSettings":
        """The sampling flags every evals command shares (--max_new_tokens, --temperature, --top_k, --top_p)."""
        return cls(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                   top_p=args.top_p)


def _digest(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class DiskCache:
    """A directory of small JSON files, one per key (sharded by the key's first two hex digits)."""

    def __init__(self, root: str, kind: str):
        self.dir = os.path.join(root, kind)

    def _path(self, key: str) -> str:
        return os.path.join(self.dir, key[:2], key + ".json")

    def get(self, key: str):
        p = self._path(key)
        if not os.path.exists(p):
            return None
        try:
            with open(p) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def put(self, key: str, value) -> None:
        p = self._path(key)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        tmp = f"{p}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(value, f, ensure_ascii=False)
        os.replace(tmp, p)


def answer_key(fingerprint: str, prompt: str, seed: int, settings: GenSettings) -> str:
    return _digest("answer-v1", fingerprint, prompt, int(seed), settings.key())


def shuffle_words(text: str, seed) -> str:
    """The words of `text` (whitespace-separated) in a seeded random order that differs from the original
    whenever the text has two different words; the multiset of words is kept."""
    words = text.split()
    if len(set(words)) < 2:
        return " ".join(words)
    rng = random.Random(_digest("shuffle", seed, text))
    out = list(words)
    for _ in range(100):
        rng.shuffle(out)
        if out != words:
            break
    if out == words:  # pragma: no cover - astronomically unlikely; rotate to a different order
        k = next(i for i in range(1, len(words)) if words[i:] + words[:i] != words)
        out = words[k:] + words[:k]
    return " ".join(out)


def _prompt_keys(seed: int, prompts: Sequence[str]):
    import jax
    import jax.numpy as jnp

    words = np.zeros((len(prompts), 2), np.uint32)
    for i, p in enumerate(prompts):
        words[i] = np.frombuffer(hashlib.sha256(p.encode()).digest()[:8], np.uint32)
    base = jax.random.key(int(seed))
    return jax.vmap(lambda w: jax.random.fold_in(jax.random.fold_in(base, w[0]), w[1]))(jnp.asarray(words))


def _sample_texts(model, tokenizer, prompts: list[str], seed: int, s: GenSettings, batch_size: int, bar) -> list[str]:
    """Samples one answer per prompt: length-sorted fixed-size batches, bucketed prompt widths."""
    import evals.generate as me  # the module attribute, so that tests can count sampler calls

    ids = [tokenizer.encode_chat(p, system=s.system) for p in prompts]
    order = sorted(range(len(prompts)), key=lambda i: len(ids[i]))
    out: list[str | None] = [None] * len(prompts)
    bs = max(1, min(batch_size, len(prompts)))
    for start in range(0, len(order), bs):
        idx = order[start:start + bs]
        rows = [ids[i] for i in idx]
        texts = [prompts[i] for i in idx]
        pad = bs - len(rows)  # fixed batch: padding rows repeat the first prompt and are dropped
        rows += [rows[0]] * pad
        texts += [texts[0]] * pad
        res = me.sample(model, rows, max_new_tokens=s.max_new_tokens, num_samples=1, temperature=s.temperature,
                        top_k=s.top_k, top_p=s.top_p, min_p=s.min_p, eos_ids=tokenizer.eos_ids,
                        pad_id=tokenizer.pad_id, prompt_keys=_prompt_keys(seed, texts),
                        prompt_length=bucket_length(max(len(r) for r in rows)))
        comps = res.completions()
        for k, i in enumerate(idx):
            out[i] = tokenizer.decode(comps[k]).strip()
        if bar is not None:
            bar.update(len(idx))
    return out  # type: ignore[return-value]


def generate_answers(member, prompts: Sequence[str], *, seed: int = 0, settings: GenSettings = GenSettings(),
                     cache_dir: str, batch_size: int = 8, progress: bool = True, desc: str = "") -> list[str]:
    """One answer per prompt from `member` (a models.LoadedMember or ShuffledMember), cached on disk.

    The model is loaded only when some answer is missing. A ShuffledMember shuffles the inner member's
    (cached) answers with a seed drawn from (seed, prompt)."""
    from evals.models import ShuffledMember

    if isinstance(member, ShuffledMember):
        inner = generate_answers(member.inner, prompts, seed=seed, settings=settings, cache_dir=cache_dir,
                                 batch_size=batch_size, progress=progress, desc=desc)
        return [shuffle_words(a, (seed, p)) for a, p in zip(inner, prompts)]
    cache = DiskCache(cache_dir, "answers")
    fp = member.fingerprint
    keys = [answer_key(fp, p, seed, settings) for p in prompts]
    out: list[str | None] = []
    for k in keys:
        hit = cache.get(k)
        out.append(None if hit is None else hit["text"])
    missing = [i for i, a in enumerate(out) if a is None]
    if missing:
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(missing), desc=f"generate {desc or member.spec.label}", unit="answer",
                       dynamic_ncols=True)
        try:
            texts = _sample_texts(member.model, member.tokenizer, [prompts[i] for i in missing], seed, settings,
                                  batch_size, bar)
        finally:
            if bar is not None:
                bar.close()
        for i, t in zip(missing, texts):
            out[i] = t
            cache.put(keys[i], {"text": t, "fingerprint": fp, "prompt": prompts[i], "seed": int(seed),
                                "settings": settings.key()})
    return out  # type: ignore[return-value]


def word_count(text: str) -> int:
    return len(re.findall(r"\S+", text))
