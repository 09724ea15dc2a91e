"""Model configuration: one frozen dataclass for Qwen3, Qwen2 and Llama-family decoders.

Parses Hugging Face `config.json` files written by transformers 4 (`rope_theta`, `torch_dtype`,
`rope_scaling`) and transformers 5 (`rope_parameters`, `dtype`), and holds presets with the real
shapes of the models we train, so `jax.eval_shape` can size them without weights.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

ARCHS = ("qwen3", "qwen2", "llama")
REMAT_POLICIES = ("none", "full", "dots_saveable")
ATTENTION_IMPLS = ("plain", "xla", "cudnn", "chunked")
RUNTIME_FIELDS = ("scan_layers", "remat", "attention", "attention_chunk")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    arch: str  # "qwen3" (q/k RMSNorm per head), "qwen2" (biases on q/k/v) or "llama" (neither)
    vocab_size: int  # V
    hidden_size: int  # D
    intermediate_size: int  # F
    num_layers: int  # L
    num_heads: int  # N
    num_kv_heads: int  # K
    head_dim: int  # H (Qwen3: not hidden_size / num_heads)
    rope_theta: float = 10000.0
    # Llama 3 frequency scaling: dict(factor, low_freq_factor, high_freq_factor,
    # original_max_position_embeddings) or None. Stored as a sorted tuple so the config hashes.
    rope_scaling: tuple[tuple[str, float], ...] | None = None
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 32768
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    name: str = ""
    # How the forward runs (no effect on the numbers beyond float rounding); see transformer.py.
    scan_layers: bool = True  # lax.scan over the stacked layers (one compiled layer body) or an unrolled loop
    remat: str = "none"  # "none", "full" (recompute each layer in backward) or "dots_saveable"
    attention: str = "plain"  # "plain", "xla"/"cudnn" (jax.nn.dot_product_attention), "chunked"
    attention_chunk: int = 512  # query block of the "chunked" attention

    def __post_init__(self):
        if self.arch not in ARCHS:
            raise ValueError(f"arch must be one of {ARCHS}, got {self.arch!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
        if self.remat not in REMAT_POLICIES:
            raise ValueError(f"remat must be one of {REMAT_POLICIES}, got {self.remat!r}")
        if self.attention not in ATTENTION_IMPLS:
            raise ValueError(f"attention must be one of {ATTENTION_IMPLS}, got {self.attention!r}")
        if self.attention_chunk < 1:
            raise ValueError(f"attention_chunk must be >= 1, got {self.attention_chunk}")

    @property
    def qk_norm(self) -> bool:
        return self.arch == "qwen3"

    @property
    def qkv_bias(self) -> bool:
        return self.arch == "qwen2"

    @property
    def rope_scaling_dict(self) -> dict[str, float] | None:
        return dict(self.rope_scaling) if self.rope_scaling else None

    def replace(self, **kw) -> "ModelConfig":
        return dataclasses.replace(self, **kw)

    # --- Hugging Face config.json -------------------------------------------------------------

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any], name: str = "") -> "ModelConfig":
        model_type = d.get("model_type", "")
        if model_type in ("qwen3", "qwen2"):
            arch = model_type
        elif model_type in ("llama", "mistral"):
            arch = "llama"
        else:
            raise ValueError(f"unsupported model_type {model_type!r} (supported: qwen3, qwen2, llama, mistral)")
        windowed = "sliding_attention" in (d.get("layer_types") or ()) or (
                d.get("use_sliding_window") and d.get("sliding_window") is not None
                and d.get("max_window_layers", 0) < d.get("num_hidden_layers", 0))
        if model_type == "qwen2" and windowed:
            # Qwen2 releases ship use_sliding_window=false; a windowed layer would attend differently here.
            raise ValueError("Qwen2 sliding-window attention (use_sliding_window=true) is not supported")
        if arch == "llama" and (d.get("attention_bias") or d.get("mlp_bias")):
            raise ValueError("Llama checkpoints with attention_bias or mlp_bias are not supported")
        required = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
        missing = [k for k in required if k not in d]
        if missing:
            raise ValueError(f"config.json is missing {missing}")
        num_heads = d["num_attention_heads"]
        head_dim = d.get("head_dim") or d["hidden_size"] // num_heads
        # transformers 5 moved rope_theta and rope_scaling into rope_parameters.
        rope_params = dict(d.get("rope_parameters") or {})
        rope_scaling = dict(d.get("rope_scaling") or {}) or rope_params
        theta = d.get("rope_theta", rope_params.get("rope_theta", 10000.0))
        rope_type = rope_scaling.get("rope_type", rope_scaling.get("type", "default"))
        scaling = None
        if rope_type == "llama3":
            scaling = tuple(sorted((k, float(rope_scaling[k])) for k in (
                    "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")))
        elif rope_type not in ("default", None):
            raise ValueError(f"unsupported rope scaling type {rope_type!r} (supported: default, llama3)")
        eos = d.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, (list, tuple)) else ((eos,) if eos is not None else ())
        return cls(
                arch=arch,
                vocab_size=d["vocab_size"],
                hidden_size=d["hidden_size"],
                intermediate_size=d["intermediate_size"],
                num_layers=d["num_hidden_layers"],
                num_heads=num_heads,
                num_kv_heads=d.get("num_key_value_heads") or num_heads,
                head_dim=head_dim,
                rope_theta=float(theta),
                rope_scaling=scaling,
                rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
                tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
                max_position_embeddings=int(d.get("max_position_embeddings", 32768)),
                bos_token_id=d.get("bos_token_id"),
                eos_token_ids=eos_ids,
                name=name or d.get("_name_or_path", ""),
        )

    @classmethod
    def from_json(cls, path: str) -> "ModelConfig":
        with open(path) as f:
            d = json.load(f)
        return cls.from_hf_dict(d, name=os.path.basename(os.path.dirname(os.path.abspath(path))))

    @staticmethod
    def hf_dtype(d: dict[str, Any]) -> str | None:
        """The checkpoint's dtype string, under either key (`dtype` in transformers 5)."""
        return d.get("dtype") or d.get("torch_dtype")


def _qwen3(name, hidden, inter, layers, heads, tied):
    return ModelConfig(
            arch="qwen3", vocab_size=151936, hidden_size=hidden, intermediate_size=inter,
            num_layers=layers, num_heads=heads, num_kv_heads=8, head_dim=128, rope_theta=1_000_000.0,
            rms_norm_eps=1e-6, tie_word_embeddings=tied, max_position_embeddings=40960,
            bos_token_id=None, eos_token_ids=(151645, 151643), name=name)


PRESETS: dict[str, ModelConfig] = {
        "qwen3-0.6b": _qwen3("qwen3-0.6b", 1024, 3072, 28, 16, True),
        "qwen3-1.7b": _qwen3("qwen3-1.7b", 2048, 6144, 28, 16, True),
        "qwen3-4b": _qwen3("qwen3-4b", 2560, 9728, 36, 32, True),
        "qwen3-8b": _qwen3("qwen3-8b", 4096, 12288, 36, 32, False),
        "qwen3-14b": _qwen3("qwen3-14b", 5120, 17408, 40, 40, False),
        # Qwen2.5-1.5B(-Instruct, -Coder-Instruct): the embedded judge's shapes.
        "qwen2.5-1.5b": ModelConfig(
                arch="qwen2", vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_layers=28,
                num_heads=12, num_kv_heads=2, head_dim=128, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                tie_word_embeddings=True, max_position_embeddings=32768, bos_token_id=151643,
                eos_token_ids=(151645, 151643), name="qwen2.5-1.5b"),
        "llama-3.2-3b": ModelConfig(
                arch="llama", vocab_size=128256, hidden_size=3072, intermediate_size=8192, num_layers=28,
                num_heads=24, num_kv_heads=8, head_dim=128, rope_theta=500000.0,
                rope_scaling=(("factor", 32.0), ("high_freq_factor", 4.0), ("low_freq_factor", 1.0),
                                            ("original_max_position_embeddings", 8192.0)),
                rms_norm_eps=1e-5, tie_word_embeddings=True, max_position_embeddings=131072,
                bos_token_id=128000, eos_token_ids=(128009, 128001, 128008), name="llama-3.2-3b"),
        "smollm2-135m": ModelConfig(
                arch="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30,
                num_heads=9, num_kv_heads=3, head_dim=64, rope_theta=100000.0, rms_norm_eps=1e-5,
                tie_word_embeddings=True, max_position_embeddings=8192, bos_token_id=1,
                eos_token_ids=(2, 0), name="smollm2-135m"),
        # Test-sized Qwen3 with the real tokenizer's vocabulary and head_dim != hidden / heads.
        "tiny": ModelConfig(
                arch="qwen3", vocab_size=151936, hidden_size=64, intermediate_size=128, num_layers=2,
                num_heads=4, num_kv_heads=2, head_dim=32, rope_theta=10000.0, rms_norm_eps=1e-6,
                tie_word_embeddings=True, max_position_embeddings=2048, eos_token_ids=(151645, 151643),
                name="tiny"),
}


def get_preset(name: str) -> ModelConfig:
    key = name.lower()
    if key not in PRESETS:
        raise KeyError(f"unknown model preset {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[key]
