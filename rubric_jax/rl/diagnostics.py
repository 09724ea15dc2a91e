"""Per-step diagnostics of the rollouts: lengths, truncation, policy entropy, foreign-script tokens.

The foreign-script rate catches a known hacking artifact of self-judged RL: the policy drifts into
tokens of another writing system (e.g. CJK characters in an English story) that the judge does not
penalise. A completion token counts as foreign when it holds a letter of a script that the prompt
does not use.
"""

from __future__ import annotations

import functools
import unicodedata
from typing import Sequence

import numpy as np

from rubric_jax.rl.policy import RolloutBatch
from rubric_jax.sampling import left_pad


@functools.lru_cache(maxsize=65536)
def _char_script(ch: str) -> str | None:
    if not ch.isalpha():
        return None
    name = unicodedata.name(ch, "")
    if not name:
        return "UNKNOWN"
    first = name.split(" ")[0]
    if first in ("CJK", "HIRAGANA", "KATAKANA", "HANGUL", "IDEOGRAPHIC"):
        return "CJK"
    return first  # LATIN, CYRILLIC, GREEK, ARABIC, HEBREW, DEVANAGARI, THAI, ...


def scripts(text: str) -> set[str]:
    return {s for s in map(_char_script, text) if s is not None}


def foreign_token_rate(prompt: str, token_texts: Sequence[str]) -> float:
    """Fraction of tokens containing a letter whose script the prompt does not use."""
    allowed = scripts(prompt) or {"LATIN"}
    if not token_texts:
        return 0.0
    return float(np.mean([bool(scripts(t) - allowed) for t in token_texts]))


def completion_rows(out, prompts: Sequence[str], texts: Sequence[str], tokenizer) -> dict[str, np.ndarray]:
    """Per-rollout figures behind `completion_metrics` (one entry per row, so processes can pool them)."""
    g = out.num_samples
    cmask = out.completion_mask()
    ended, foreign = [], []
    for i, comp in enumerate(out.completions()):
        ended.append(any(t in tokenizer.eos_ids for t in comp))
        pieces = [tokenizer.decode([t]) for t in comp if t not in tokenizer.eos_ids]
        foreign.append(foreign_token_rate(prompts[i // g], pieces))
    return {"length": out.lengths.astype(np.float32), "ended": np.asarray(ended, bool),
            "foreign": np.asarray(foreign, np.float64), "empty": np.asarray([not t.strip() for t in texts], bool),
            "entropy_sum": (out.entropy * cmask).sum(axis=1).astype(np.float64),
            "tokens": cmask.sum(axis=1).astype(np.int64)}


def completion_metrics(rows: dict[str, np.ndarray]) -> dict[str, float]:
    """Lengths, truncation, mean policy entropy per token, foreign-script rate and empty completions."""
    lengths = rows["length"]
    return {
        "completion_len/mean": float(lengths.mean()), "completion_len/max": float(lengths.max()),
        "completion_len/min": float(lengths.min()),
        "completion_truncated": float(1.0 - rows["ended"].mean()),
        "policy_entropy": float(rows["entropy_sum"].sum() / max(int(rows["tokens"].sum()), 1)),
        "foreign_script_rate": float(np.mean(rows["foreign"])),
        "empty_completions": float(np.mean(rows["empty"])),
    }


def example_context(tokenizer, record, example_text: str) -> list[int]:
    """The prompt again, after showing one response as an example (the usefulness bonus' context)."""
    content = ("Here is an example of a response to a writing request:\n\n" + example_text +
               "\n\nNow respond to this request:\n" + record.prompt)
    return tokenizer.encode_chat(content, system=record.system)


def mean_nll(policy, contexts: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], tokenizer) -> np.ndarray:
    """Per-row mean negative log-likelihood of targets after contexts, under the reference model."""
    ctx_tokens, ctx_mask = left_pad(contexts, tokenizer.pad_id)
    tc = max(len(t) for t in targets)
    tgt = np.full((len(targets), tc), tokenizer.pad_id, np.int32)
    tmask = np.zeros((len(targets), tc), bool)
    for i, t in enumerate(targets):
        tgt[i, :len(t)] = t
        tmask[i, :len(t)] = True
    batch = RolloutBatch(tokens_bt=np.concatenate([ctx_tokens, tgt], 1), mask_bt=np.concatenate([ctx_mask, tmask], 1),
                         prompt_len=ctx_tokens.shape[1], completion_mask_bt=tmask,
                         adv_b=np.zeros(len(targets), np.float32))
    logp = policy.logprobs(batch, reference=True)
    return -(logp * tmask).sum(1) / np.maximum(tmask.sum(1), 1)
