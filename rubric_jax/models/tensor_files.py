"""Tensors as checkpoint files hold them, under their Hugging Face names: which names our parameters have
(`_hf_names`), the error for a file that cannot be read, and GGUF's metadata and tensors (renamed, dequantised
with the `gguf` package and, for Llama, un-permuted). The loader (models/loading.py), the exporter and the GGUF
cache all read through here, so none of them imports another for it.
"""

from __future__ import annotations

import contextlib
import os
import re

import numpy as np

from rubric_jax.models.config import ModelConfig


class CheckpointFileError(ValueError):
    """A checkpoint file that cannot be read (truncated download, corrupt bytes); names the file."""


@contextlib.contextmanager
def _naming(path: str, kind: str):
    """Re-raises a reader's error (whose message rarely names the file) with the file's path and size."""
    try:
        yield
    except CheckpointFileError:
        raise
    except Exception as e:  # safetensors / gguf / numpy each raise their own types for broken files
        size = os.path.getsize(path) if os.path.exists(path) else 0
        raise CheckpointFileError(f"{path} ({size} bytes) is not a readable {kind} file; it may be truncated or "
                                  f"corrupt (download it again): {type(e).__name__}: {e}") from e


def _hf_names(path: tuple, num_layers: int) -> list[str]:
    """Our parameter path -> its Hugging Face tensor names (one per layer for the stacked layers)."""
    parts = [str(p) for p in path]
    leaf = parts[-1]
    if parts[0] == "lm_head":
        return ["lm_head.weight"]
    if leaf not in ("kernel", "scale", "embedding", "bias"):
        raise ValueError(f"unmapped parameter {'/'.join(parts)}")
    kind = "bias" if leaf == "bias" else "weight"
    if parts[0] == "layers":
        rest = ".".join(parts[1:-1])
        return [f"model.layers.{i}.{rest}.{kind}" for i in range(num_layers)]
    return [f"model.{'.'.join(parts[:-1])}.{kind}"]


# GGUF (llama.cpp).

_GGUF_LAYER = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
_GGUF_GLOBAL = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                "output.weight": "lm_head.weight"}


def gguf_to_hf_name(name: str) -> str:
    if name in _GGUF_GLOBAL:
        return _GGUF_GLOBAL[name]
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.(weight|bias)", name)
    if m and m.group(2) in _GGUF_LAYER:
        return f"model.layers.{m.group(1)}.{_GGUF_LAYER[m.group(2)]}.{m.group(3)}"
    return name  # reported as unexpected by assign_hf_tensors


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def gguf_config(reader) -> ModelConfig:
    arch = _field(reader, "general.architecture")
    if arch not in ("llama", "qwen3", "qwen2"):
        raise ValueError(f"unsupported GGUF architecture {arch!r} (supported: llama, qwen3, qwen2)")
    if any(t.name == "rope_freqs.weight" for t in reader.tensors):
        raise ValueError("GGUF carries rope_freqs (Llama 3.1+ rope scaling); load the HF safetensors checkpoint instead")
    tokens = _field(reader, "tokenizer.ggml.tokens")
    heads = int(_field(reader, f"{arch}.attention.head_count"))
    hidden = int(_field(reader, f"{arch}.embedding_length"))
    names = {t.name for t in reader.tensors}
    eos = _field(reader, "tokenizer.ggml.eos_token_id")
    return ModelConfig(
        arch=arch,
        vocab_size=int(_field(reader, f"{arch}.vocab_size", len(tokens) if tokens else _embedding_rows(reader))),
        hidden_size=hidden,
        intermediate_size=int(_field(reader, f"{arch}.feed_forward_length")),
        num_layers=int(_field(reader, f"{arch}.block_count")),
        num_heads=heads,
        num_kv_heads=int(_field(reader, f"{arch}.attention.head_count_kv", heads)),
        head_dim=int(_field(reader, f"{arch}.attention.key_length", hidden // heads)),
        rope_theta=float(_field(reader, f"{arch}.rope.freq_base", 10000.0)),
        rms_norm_eps=float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)),
        tie_word_embeddings="output.weight" not in names,
        max_position_embeddings=int(_field(reader, f"{arch}.context_length", 4096)),
        bos_token_id=_field(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_ids=(int(eos),) if eos is not None else (),
        name=str(_field(reader, "general.name", "")),
    )


def _embedding_rows(reader) -> int:
    """The vocabulary size as the embedding's row count (ggml lists dims fastest-first: (D, V))."""
    t = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    return int(t.shape[-1]) if t is not None else 0


def _unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's Llama q/k row permutation (interleaved rotary pairs -> HF rotate-half halves)."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tensors(path: str):
    """(reader, config, Hugging Face tensor names, get(name) -> float32 array) of a GGUF file."""
    import gguf
    from gguf import quants

    with _naming(path, "GGUF"):
        reader = gguf.GGUFReader(path)
    cfg = gguf_config(reader)
    by_name = {gguf_to_hf_name(t.name): t for t in reader.tensors}

    def get(name):
        t = by_name[name]
        with _naming(path, "GGUF"):
            w = np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        # ggml lists dims fastest-first; numpy's shape is the HF (out, in) order.
        expect = tuple(int(d) for d in reversed(t.shape))
        if w.shape != expect:
            w = w.reshape(expect)
        if cfg.arch == "llama" and name.endswith("self_attn.q_proj.weight"):
            w = _unpermute_qk(w, cfg.num_heads)
        elif cfg.arch == "llama" and name.endswith("self_attn.k_proj.weight"):
            w = _unpermute_qk(w, cfg.num_kv_heads)
        return w

    return reader, cfg, list(by_name), get
