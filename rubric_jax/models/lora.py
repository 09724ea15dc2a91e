"""LoRA applied from outside the model: targeted `Linear` modules are wrapped, the base stays frozen.

  y = x W + (dropout(x) A) B * alpha / r,   A ~ N(0, 1/in) (in_shape + (r,)),  B = 0 ((r,) + out_shape)

so a fresh adapter reproduces the base model exactly. Only `nnx.LoRAParam` variables are trained
(`nnx.split(model, nnx.LoRAParam, ...)`). The reference policy of GRPO's KL term is the same weights with
adapters switched off (`with lora_disabled():` while tracing), so no second copy of the base exists.
`merge_lora` folds the adapters into plain kernels (export, fast sampling); `unmerge_lora` undoes it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
from typing import Iterator, Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from rubric_jax.models.transformer import Linear, Transformer

ATTN_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_TARGETS = ("gate_proj", "up_proj", "down_proj")
ALL_TARGETS = ATTN_TARGETS + MLP_TARGETS


@dataclasses.dataclass
class _Ctx(threading.local):
    enabled: bool = True
    dropout_key: jax.Array | None = None


_CTX = _Ctx()


@contextlib.contextmanager
def lora_disabled() -> Iterator[None]:
    """Inside (at trace time), LoRA modules return the base output: the reference policy."""
    prev = _CTX.enabled
    _CTX.enabled = False
    try:
        yield
    finally:
        _CTX.enabled = prev


@contextlib.contextmanager
def lora_dropout(key: jax.Array | None) -> Iterator[None]:
    """Enables adapter dropout (training forward) with this key; each module folds in its own id."""
    prev = _CTX.dropout_key
    _CTX.dropout_key = key
    try:
        yield
    finally:
        _CTX.dropout_key = prev


@dataclasses.dataclass(frozen=True)
class LoRAConfig:
    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple[str, ...] = ALL_TARGETS

    def __post_init__(self):
        unknown = set(self.targets) - set(ALL_TARGETS)
        if unknown:
            raise ValueError(f"unknown LoRA targets {sorted(unknown)}; choose from {ALL_TARGETS}")
        if self.rank < 1:
            raise ValueError(f"LoRA rank must be >= 1, got {self.rank}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoRA dropout must be in [0, 1), got {self.dropout}")

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


class LoRALinear(nnx.Module):
    def __init__(self, base: Linear, cfg: LoRAConfig, module_id: int, *, rngs: nnx.Rngs):
        self.base = base
        self.in_shape, self.out_shape = base.in_shape, base.out_shape
        self.scale = cfg.scale
        self.dropout = cfg.dropout
        self.module_id = module_id
        axes = base.kernel.get_metadata().get("axes", (None,) * (len(self.in_shape) + len(self.out_shape)))
        n_in = len(self.in_shape)
        fan_in = math.prod(self.in_shape)
        a = jax.random.normal(rngs.params(), (*self.in_shape, cfg.rank), jnp.float32) / math.sqrt(fan_in)
        # Adapters stay f32 even over a bf16 base: their updates are tiny relative to the weights.
        self.lora_a = nnx.LoRAParam(a, axes=tuple(axes[:n_in]) + ("lora_rank",))
        self.lora_b = nnx.LoRAParam(jnp.zeros((cfg.rank, *self.out_shape), jnp.float32),
                                    axes=("lora_rank",) + tuple(axes[n_in:]))

    def delta_kernel(self) -> jax.Array:
        """A B * scale with the kernel's shape (in_shape + out_shape)."""
        r = self.lora_a.get_value().shape[-1]
        a = self.lora_a.get_value().reshape(-1, r)
        b = self.lora_b.get_value().reshape(r, -1)
        return (a @ b * self.scale).reshape(*self.in_shape, *self.out_shape)

    def __call__(self, x):
        y = self.base(x)
        if not _CTX.enabled:
            return y
        lead = x.shape[: x.ndim - len(self.in_shape)]
        xf = x.reshape(*lead, -1).astype(jnp.float32)
        if self.dropout > 0 and _CTX.dropout_key is not None:
            key = jax.random.fold_in(_CTX.dropout_key, self.module_id)
            keep = jax.random.bernoulli(key, 1.0 - self.dropout, xf.shape)
            xf = jnp.where(keep, xf / (1.0 - self.dropout), 0.0)
        r = self.lora_a.get_value().shape[-1]
        h = xf @ self.lora_a.get_value().reshape(-1, r)
        delta = (h @ self.lora_b.get_value().reshape(r, -1)) * self.scale
        return y + delta.reshape(*lead, *self.out_shape).astype(y.dtype)


def _target_slots(model: Transformer, targets: Sequence[str]):
    """(parent module, attribute name) of every targeted projection, in a fixed order."""
    for layer in model.layers:
        for name in targets:
            parent = layer.self_attn if name in ATTN_TARGETS else layer.mlp
            yield parent, name


def apply_lora(model: Transformer, cfg: LoRAConfig, *, seed: int = 0) -> Transformer:
    """Wraps the targeted projections of `model` in place (and returns it)."""
    rngs = nnx.Rngs(seed)
    for i, (parent, name) in enumerate(_target_slots(model, cfg.targets)):
        mod = getattr(parent, name)
        if isinstance(mod, LoRALinear):
            raise ValueError(f"LoRA already applied to {name}")
        setattr(parent, name, LoRALinear(mod, cfg, module_id=i, rngs=rngs))
    return model


def lora_modules(model: Transformer) -> list[tuple[int, str, LoRALinear]]:
    """(layer index, projection name, module) for every LoRA-wrapped projection."""
    out = []
    for li, layer in enumerate(model.layers):
        for name in ALL_TARGETS:
            parent = layer.self_attn if name in ATTN_TARGETS else layer.mlp
            mod = getattr(parent, name)
            if isinstance(mod, LoRALinear):
                out.append((li, name, mod))
    return out


def merge_lora(model: Transformer) -> Transformer:
    """Folds adapters into the base kernels and removes the wrappers (in place; returns the model)."""
    for li, name, mod in lora_modules(model):
        k = mod.base.kernel
        k.set_value((k.get_value().astype(jnp.float32) + mod.delta_kernel()).astype(k.get_value().dtype))
        parent = model.layers[li].self_attn if name in ATTN_TARGETS else model.layers[li].mlp
        setattr(parent, name, mod.base)
    return model


def unmerge_lora(model: Transformer, adapters: dict[tuple[int, str], LoRALinear]) -> Transformer:
    """Inverse of merge_lora given the removed adapter modules ({(layer, name): module})."""
    for (li, name), mod in adapters.items():
        parent = model.layers[li].self_attn if name in ATTN_TARGETS else model.layers[li].mlp
        base = getattr(parent, name)
        base.kernel.set_value((base.kernel.get_value().astype(jnp.float32) - mod.delta_kernel())
                              .astype(base.kernel.get_value().dtype))
        mod.base = base
        setattr(parent, name, mod)
    return model


def lora_param_count(model: nnx.Module) -> int:
    return sum(math.prod(x.shape) for x in jax.tree.leaves(nnx.state(model, nnx.LoRAParam)))
