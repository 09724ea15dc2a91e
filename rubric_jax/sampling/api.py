"""Text-in, text-out generation on top of the token sampler."""

from __future__ import annotations

from typing import Sequence

from rubric_jax.models.tokenizer import Tokenizer
from rubric_jax.models.transformer import Transformer
from rubric_jax.sampling.sampler import SampleOutput, sample


def encode_prompts(tokenizer: Tokenizer, prompts: Sequence[str], *, chat: bool = True,
                   system: str | None = None) -> list[list[int]]:
    if isinstance(prompts, str):
        raise TypeError("prompts must be a list of strings, not one string")
    if chat:
        return [tokenizer.encode_chat(p, system=system) for p in prompts]
    return [tokenizer.encode(p) for p in prompts]


def generate_tokens(model: Transformer, tokenizer: Tokenizer, prompts: Sequence[str], *, max_new_tokens: int = 128,
                    num_samples: int = 1, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                    min_p: float = 0.0, seed=0, chat: bool = True, system: str | None = None) -> SampleOutput:
    ids = encode_prompts(tokenizer, prompts, chat=chat, system=system)
    return sample(model, ids, max_new_tokens=max_new_tokens, num_samples=num_samples, temperature=temperature,
                  top_k=top_k, top_p=top_p, min_p=min_p, eos_ids=tokenizer.eos_ids, pad_id=tokenizer.pad_id,
                  seed=seed)


def generate(model: Transformer, tokenizer: Tokenizer, prompts: Sequence[str], max_new_tokens: int = 128,
             temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0, seed=0, *,
             chat: bool = True, system: str | None = None, num_samples: int = 1) -> list[str]:
    """Completions as text: len(prompts) * num_samples strings (sample g of prompt b at b * G + g).

    `chat=True` wraps each prompt as a user turn with the tokenizer's chat template; temperature 0 is
    greedy decoding.
    """
    out = generate_tokens(model, tokenizer, prompts, max_new_tokens=max_new_tokens, num_samples=num_samples,
                          temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed, chat=chat,
                          system=system)
    return [tokenizer.decode(c) for c in out.completions()]
