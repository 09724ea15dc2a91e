"""Export: a merged Hugging Face checkpoint, and a PEFT-format LoRA adapter.

`export_hf` writes config.json + model.safetensors (sharded with an index above `max_shard_size`) in the
layout `transformers.AutoModelForCausalLM.from_pretrained` and `rubric_jax.load_model` read. LoRA-wrapped
projections are exported merged (base kernel + A B alpha/r, summed in f32) without touching the model.

`export_peft` writes adapter_model.safetensors + adapter_config.json that `peft.PeftModel.from_pretrained`
loads onto the base checkpoint. Both are the inverse of loading.py's name and layout mapping:
our kernels are in_shape + out_shape, a torch Linear weight is (out_features, in_features), so
  weight = kernel.reshape(in, out).T,  lora_A.weight = A.reshape(in, r).T,  lora_B.weight = B.reshape(r, out).T.

The safetensors files are written tensor by tensor (header first, then each tensor computed and streamed),
so peak host memory is one tensor, not the model. Neither torch nor peft is needed to export.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Callable, Iterable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rubric_jax.models.tensor_files import _hf_names
from rubric_jax.models.lora import ATTN_TARGETS, LoRAConfig, LoRALinear, lora_modules
from rubric_jax.models.transformer import Transformer

# name -> (numpy dtype, safetensors dtype tag)
_DTYPES = {
    "float32": (np.dtype(np.float32), "F32"),
    "bfloat16": (np.dtype(jnp.bfloat16), "BF16"),
    "float16": (np.dtype(np.float16), "F16"),
}

DEFAULT_MAX_SHARD_SIZE = 5 * 1024**3  # bytes, as transformers' default "5GB"


def _dtype_name(dtype) -> str:
    if isinstance(dtype, str):
        name = dtype.lower().removeprefix("torch.")
        name = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16",
                "float": "float32"}.get(name, name)
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = repr(dtype)
    if name not in _DTYPES:
        raise ValueError(f"unsupported export dtype {dtype!r}; choose one of {sorted(_DTYPES)}")
    return name


def _parse_size(size) -> int:
    if isinstance(size, (int, np.integer)):
        n = int(size)
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?I?B)?\s*", str(size).upper())
        if not m:
            raise ValueError(f"cannot parse size {size!r} (e.g. 5GB, 500MB, or a byte count)")
        unit = m.group(2) or "B"
        base = 1024 if "I" in unit else 1000
        n = int(float(m.group(1)) * base ** "BKMGT".index(unit[0]))
    if n <= 0:
        raise ValueError(f"max_shard_size must be positive, got {size!r}")
    return n


# ---------------------------------------------------------------------------------------------
# Streaming safetensors writer.

_Tensor = tuple[str, tuple[int, ...], Callable[[], np.ndarray]]  # (name, shape, producer)


def _write_safetensors(path: str, tensors: list[_Tensor], np_dtype: np.dtype, tag: str,
                       metadata: dict[str, str] | None = None) -> None:
    header: dict = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    for name, shape, _ in tensors:
        nbytes = math.prod(shape) * np_dtype.itemsize
        header[name] = {"dtype": tag, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data section starts 8-byte aligned
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        for name, shape, produce in tensors:
            arr = np.ascontiguousarray(produce())
            if arr.shape != tuple(shape) or arr.dtype != np_dtype:
                raise AssertionError(f"{name}: produced {arr.shape} {arr.dtype}, declared {shape} {np_dtype}")
            f.write(arr.tobytes())
    os.replace(tmp, path)


def _write_sharded(out_dir: str, stem: str, tensors: list[_Tensor], np_dtype, tag, max_shard_size: int) -> list[str]:
    """Writes `{stem}.safetensors`, or `{stem}-0000i-of-0000n.safetensors` + `{stem}.safetensors.index.json`."""
    shards: list[list[_Tensor]] = [[]]
    size = 0
    for t in tensors:
        nbytes = math.prod(t[1]) * np_dtype.itemsize
        if shards[-1] and size + nbytes > max_shard_size:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += nbytes
    # Remove stale files of an earlier export to the same directory (a different shard count would mix).
    for f in os.listdir(out_dir):
        if re.fullmatch(re.escape(stem) + r"(-\d{5}-of-\d{5})?\.safetensors(\.index\.json)?", f):
            os.remove(os.path.join(out_dir, f))
    if len(shards) == 1:
        name = f"{stem}.safetensors"
        _write_safetensors(os.path.join(out_dir, name), shards[0], np_dtype, tag)
        return [name]
    names, weight_map = [], {}
    for i, shard in enumerate(shards):
        name = f"{stem}-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        _write_safetensors(os.path.join(out_dir, name), shard, np_dtype, tag)
        names.append(name)
        weight_map.update({t[0]: name for t in shard})
    total = sum(math.prod(t[1]) for t in tensors) * np_dtype.itemsize
    with open(os.path.join(out_dir, f"{stem}.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return names


# ---------------------------------------------------------------------------------------------
# Merged Hugging Face checkpoint.

def hf_config_dict(cfg, dtype: str = "float32") -> dict:
    """config.json contents for transformers 4 and 5 (legacy rope keys and rope_parameters both)."""
    dtype = _dtype_name(dtype)
    rope_parameters = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    rope_scaling = None
    if cfg.rope_scaling:
        sc = cfg.rope_scaling_dict
        sc["original_max_position_embeddings"] = int(sc["original_max_position_embeddings"])
        rope_scaling = {"rope_type": "llama3", **sc}
        rope_parameters.update(rope_scaling)
    eos = list(cfg.eos_token_ids)
    d = {
        "architectures": [{"qwen3": "Qwen3ForCausalLM", "qwen2": "Qwen2ForCausalLM"}.get(cfg.arch, "LlamaForCausalLM")],
        "model_type": cfg.arch,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_position_embeddings,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": rope_scaling,
        "rope_parameters": rope_parameters,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": (eos[0] if len(eos) == 1 else eos) if eos else None,
        "initializer_range": 0.02,
        "use_cache": True,
        "torch_dtype": dtype,
        "dtype": dtype,
    }
    if cfg.arch == "qwen2":
        del d["attention_bias"]  # Qwen2's q/k/v biases are part of the architecture, not a config switch
    if cfg.arch in ("qwen3", "qwen2"):
        d.update(use_sliding_window=False, sliding_window=None, max_window_layers=cfg.num_layers)
    else:
        d.update(mlp_bias=False, pretraining_tp=1)
    return d


def _module_at(model, path: tuple):
    mod = model
    for p in path:
        mod = mod[p] if isinstance(p, int) else getattr(mod, str(p))
    return mod


def _merged_tensors(model: Transformer, np_dtype) -> list[_Tensor]:
    """(HF name, HF shape, producer) for every parameter; LoRA deltas folded in on the fly."""
    out = []
    # LoRAParam subclasses Param: the adapters are folded in below, not exported by name.
    base_params = nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam))
    for path, var in nnx.to_flat_state(nnx.state(model, base_params)):
        path = tuple(path)
        lora = None
        if len(path) >= 2 and path[-2] == "base":
            lora = _module_at(model, path[:-2])
            if not isinstance(lora, LoRALinear):
                raise TypeError(f"unexpected module at {'/'.join(map(str, path[:-2]))}: {type(lora).__name__}")
            path = path[:-2] + path[-1:]
        names = _hf_names(path, model.cfg.num_layers)
        stacked = path[0] == "layers"
        shape = tuple(var.get_value().shape)[1 if stacked else 0:]
        kernel = path[-1] == "kernel"
        n_in = 2 if path[-2] == "o_proj" else 1
        hf_shape = (math.prod(shape[n_in:]), math.prod(shape[:n_in])) if kernel else shape  # (out, in)
        flat = path[-1] == "bias"  # ours out_shape, e.g. (N, H); HF (out,)
        if flat:
            hf_shape = (math.prod(shape),)

        for li, name in enumerate(names):
            def produce(var=var, lora=lora, li=(li if stacked else None), kernel=kernel, n_in=n_in, flat=flat):
                w = var.get_value()
                if lora is not None and kernel:  # an adapter changes the kernel, never the bias
                    w = w.astype(jnp.float32) + lora.delta_kernel()
                if li is not None:
                    w = w[li]
                if kernel:
                    w = w.reshape(math.prod(w.shape[:n_in]), -1).T
                elif flat:
                    w = w.reshape(-1)
                return np.asarray(jax.device_get(w.astype(np_dtype)))

            out.append((name, hf_shape, produce))
    return out


def export_hf(model: Transformer, out_dir: str, *, dtype="float32", tokenizer=None,
              max_shard_size=DEFAULT_MAX_SHARD_SIZE) -> str:
    """Writes a Hugging Face checkpoint of `model` (LoRA merged) to `out_dir`; returns `out_dir`.

    dtype: "float32", "bfloat16" or "float16". tokenizer: a rubric_jax Tokenizer (or a transformers
    tokenizer) to save alongside. max_shard_size: bytes or "5GB"-style; larger exports are sharded with
    model.safetensors.index.json. The passed model is not modified.
    """
    if not isinstance(model, Transformer):
        raise TypeError(f"export_hf expects a rubric_jax Transformer, got {type(model).__name__}")
    name = _dtype_name(dtype)
    np_dtype, tag = _DTYPES[name]
    limit = _parse_size(max_shard_size)
    os.makedirs(out_dir, exist_ok=True)
    cfg = model.cfg
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(hf_config_dict(cfg, name), f, indent=2)
    gen = {k: v for k, v in (("bos_token_id", cfg.bos_token_id),
                             ("eos_token_id", list(cfg.eos_token_ids) or None)) if v is not None}
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
    _write_sharded(out_dir, "model", _merged_tensors(model, np_dtype), np_dtype, tag, limit)
    if tokenizer is not None:
        getattr(tokenizer, "hf", tokenizer).save_pretrained(out_dir)
    return out_dir


# ---------------------------------------------------------------------------------------------
# PEFT adapter.

def _lora_cfg_from_modules(mods) -> tuple[int, float, float]:
    ranks = {m.lora_a.get_value().shape[-1] for _, m in mods}
    scales = {float(m.scale) for _, m in mods}
    drops = {float(m.dropout) for _, m in mods}
    if len(ranks) != 1 or len(scales) != 1 or len(drops) != 1:
        raise ValueError(f"LoRA modules differ in rank/scale/dropout ({ranks}, {scales}, {drops}); "
                         "one adapter_config.json cannot describe them")
    (rank,), (scale,), (drop,) = ranks, scales, drops
    return rank, scale * rank, drop


def peft_config_dict(*, rank: int, alpha: float, dropout: float, target_modules: Iterable[str],
                     base_model_name_or_path: str | None, layers_to_transform=None) -> dict:
    """adapter_config.json: keys that peft's LoraConfig has had since 0.6 (later ones default)."""
    alpha = int(alpha) if float(alpha).is_integer() else float(alpha)
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model_name_or_path,
        "revision": None,
        "r": int(rank),
        "lora_alpha": alpha,
        "lora_dropout": float(dropout),
        "target_modules": sorted(target_modules),
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "init_lora_weights": True,
        "inference_mode": True,
        "modules_to_save": None,
        "layers_to_transform": layers_to_transform,
        "layers_pattern": None,
        "rank_pattern": {},
        "alpha_pattern": {},
    }


def export_peft(model: Transformer, out_dir: str, *, base_model_name_or_path: str | None = None,
                lora_cfg: LoRAConfig | None = None, dtype="float32") -> str:
    """Writes the model's LoRA adapters as a PEFT adapter (adapter_model.safetensors + adapter_config.json).

    `peft.PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), out_dir)` then computes
    the same logits as `model`. `lora_cfg` (optional) is checked against the adapters' rank and scale;
    rank, alpha and dropout are otherwise read from the modules. Returns `out_dir`.
    """
    if not isinstance(model, Transformer):
        raise TypeError(f"export_peft expects a rubric_jax Transformer, got {type(model).__name__}")
    mods = lora_modules(model)
    if not mods:
        raise ValueError("model has no LoRA modules to export (apply_lora first; a merged model exports "
                         "with export_hf)")
    name = _dtype_name(dtype)
    np_dtype, tag = _DTYPES[name]
    rank, alpha, dropout = _lora_cfg_from_modules(mods)
    if lora_cfg is not None:
        if lora_cfg.rank != rank or not math.isclose(lora_cfg.scale, alpha / rank, rel_tol=1e-6):
            raise ValueError(f"lora_cfg (rank={lora_cfg.rank}, alpha={lora_cfg.alpha}) does not match the "
                             f"model's adapters (rank={rank}, alpha={alpha:g})")
        alpha, dropout = lora_cfg.alpha, lora_cfg.dropout

    # Stacked wrappers put every adapter on all layers, so one target list describes every layer.
    targets = sorted(n for n, _ in mods)
    tensors: list[_Tensor] = []
    for li in range(model.cfg.num_layers):
        for proj, mod in mods:
            parent = "self_attn" if proj in ATTN_TARGETS else "mlp"
            prefix = f"base_model.model.model.layers.{li}.{parent}.{proj}"
            d_in, d_out = math.prod(mod.in_shape), math.prod(mod.out_shape)
            a_var, b_var = mod.lora_a, mod.lora_b
            # peft: lora_A is nn.Linear(in, r) -> weight (r, in); lora_B is nn.Linear(r, out) -> weight (out, r).
            tensors.append((f"{prefix}.lora_A.weight", (rank, d_in),
                            lambda v=a_var, d=d_in, li=li: np.asarray(jax.device_get(
                                    v.get_value()[li].reshape(d, rank).T.astype(np_dtype)))))
            tensors.append((f"{prefix}.lora_B.weight", (d_out, rank),
                            lambda v=b_var, d=d_out, li=li: np.asarray(jax.device_get(
                                    v.get_value()[li].reshape(rank, d).T.astype(np_dtype)))))

    os.makedirs(out_dir, exist_ok=True)
    cfg_dict = peft_config_dict(rank=rank, alpha=alpha, dropout=dropout, target_modules=targets,
                                base_model_name_or_path=base_model_name_or_path,
                                layers_to_transform=None)
    with open(os.path.join(out_dir, "adapter_config.json"), "w") as f:
        json.dump(cfg_dict, f, indent=2)
    _write_safetensors(os.path.join(out_dir, "adapter_model.safetensors"), tensors, np_dtype, tag)
    return out_dir
