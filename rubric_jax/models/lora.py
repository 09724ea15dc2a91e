"""LoRA applied from outside the model: targeted `Linear` modules are wrapped, the base stays frozen.

  y = x W + (dropout(x) A) B * alpha / r,   A ~ N(0, 1/in) (in_shape + (r,)),  B = 0 ((r,) + out_shape)

so a fresh adapter reproduces the base model exactly. The model's layers are stacked, so each
wrapper holds the adapters of every layer (a leading L axis, sliced by the layer scan). Only
`nnx.LoRAParam` variables are trained (`nnx.split(model, nnx.LoRAParam, ...)`).

Switches are explicit module state, never globals read at trace time: `set_lora(model, enabled=False)`
makes the wrappers return the base output (GRPO's reference policy: the same weights, no second copy),
`set_lora(model, dropout_key=key)` turns adapter dropout on with keys derived from that one. Set them
on the merged module inside the traced function, or outside it: the switches live in the graph
definition, so a jitted function called after a toggle sees a new graph and traces again.
`merge_lora` folds the adapters into plain kernels (export, fast sampling); `unmerge_lora` undoes it.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from flax import nnx

from rubric_jax.models.transformer import Linear, Transformer

ATTN_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_TARGETS = ("gate_proj", "up_proj", "down_proj")
ALL_TARGETS = ATTN_TARGETS + MLP_TARGETS


class LoRADropoutKey(nnx.Variable):
    """Per-layer PRNG keys of one wrapper's adapter dropout (not trained, not checkpointed)."""


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
        self.enabled = True
        self.dropout_on = False
        kshape = tuple(base.kernel.get_value().shape)
        n_in, n_out = len(self.in_shape), len(self.out_shape)
        self.lead = kshape[: len(kshape) - n_in - n_out]  # (L,) for stacked layers
        nl = len(self.lead)
        axes = base.kernel.get_metadata().get("axes") or (None,) * len(kshape)
        fan_in = math.prod(self.in_shape)
        a = jax.random.normal(rngs.params(), (*self.lead, *self.in_shape, cfg.rank), jnp.float32) / math.sqrt(fan_in)
        # Adapters stay f32 even over a bf16 base: their updates are tiny relative to the weights.
        self.lora_a = nnx.LoRAParam(a, axes=tuple(axes[: nl + n_in]) + ("lora_rank",))
        self.lora_b = nnx.LoRAParam(jnp.zeros((*self.lead, cfg.rank, *self.out_shape), jnp.float32),
                                    axes=tuple(axes[:nl]) + ("lora_rank",) + tuple(axes[nl + n_in:]))
        if self.dropout > 0:
            self.dropout_key = LoRADropoutKey(_layer_keys(jax.random.key(0), module_id, self.lead),
                                              axes=tuple(axes[:nl]))

    def delta_kernel(self) -> jax.Array:
        """A B * scale with the kernel's shape (lead + in_shape + out_shape)."""
        a, b = self.lora_a.get_value(), self.lora_b.get_value()
        r = a.shape[-1]
        lead = a.shape[: a.ndim - len(self.in_shape) - 1]
        d = jnp.matmul(a.reshape(*lead, -1, r), b.reshape(*lead, r, -1)) * self.scale
        return d.reshape(*lead, *self.in_shape, *self.out_shape)

    def __call__(self, x):
        y = self.base(x)
        if not self.enabled:
            return y
        lead = x.shape[: x.ndim - len(self.in_shape)]
        xf = x.reshape(*lead, -1).astype(jnp.float32)
        if self.dropout > 0 and self.dropout_on:
            keep = jax.random.bernoulli(self.dropout_key[...], 1.0 - self.dropout, xf.shape)
            xf = jnp.where(keep, xf / (1.0 - self.dropout), 0.0)
        r = self.lora_a.get_value().shape[-1]
        m = math.prod(lead)
        delta = low_rank(xf.reshape(m, -1), self.lora_a.get_value().reshape(-1, r),
                         self.lora_b.get_value().reshape(r, -1), self.scale)
        return y + delta.reshape(*lead, *self.out_shape).astype(y.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def low_rank(x_mi, a_ir, b_ro, scale: float):
    """(x A) B * scale for x (M, I), A (I, r), B (r, O).

    Its own backward, the same arithmetic as autodiff's, with the contractions over M ordered so the rank-r
    operand is the one transposed: autodiff gives dB as (g^T (x A))^T, which makes XLA:CPU transpose the
    (M, O) cotangent of every wrapped projection in every layer (a fifth of a SmolLM2 LoRA update's device
    time); here dB = (x A)^T g and dA = ((g B^T)^T x)^T read g and x in place."""
    return ((x_mi @ a_ir) @ b_ro) * scale


def _low_rank_fwd(x_mi, a_ir, b_ro, scale):
    h_mr = x_mi @ a_ir
    return (h_mr @ b_ro) * scale, (x_mi, a_ir, b_ro, h_mr)


def _low_rank_bwd(scale, res, g_mo):
    x_mi, a_ir, b_ro, h_mr = res
    g_mo = g_mo * scale
    contract_m = (((0,), (0,)), ((), ()))
    db_ro = jax.lax.dot_general(h_mr, g_mo, contract_m, preferred_element_type=jnp.float32).astype(b_ro.dtype)
    dh_mr = jnp.dot(g_mo, b_ro.T, preferred_element_type=jnp.float32)
    da_ir = jax.lax.dot_general(dh_mr, x_mi, contract_m, preferred_element_type=jnp.float32).T.astype(a_ir.dtype)
    dx_mi = jnp.dot(dh_mr, a_ir.T, preferred_element_type=jnp.float32).astype(x_mi.dtype)
    return dx_mi, da_ir, db_ro


low_rank.defvjp(_low_rank_fwd, _low_rank_bwd)


def _layer_keys(key, module_id: int, lead: tuple[int, ...]):
    """One key per layer of a wrapper: distinct across wrappers and layers."""
    return jax.random.split(jax.random.fold_in(key, module_id), math.prod(lead)).reshape(lead)


def _wrappers(model: nnx.Module) -> list[LoRALinear]:
    return [m for _, m in nnx.iter_modules(model) if isinstance(m, LoRALinear)]


def set_lora(model: nnx.Module, *, enabled: bool | None = None, dropout_key: jax.Array | None = None,
             dropout: bool | None = None) -> nnx.Module:
    """Explicit adapter switches on `model`'s wrappers (in place; returns the model).

    enabled=False gives the base model's output (the reference policy); dropout_key turns adapter
    dropout on with per-layer keys derived from it and each wrapper's id; dropout=False turns it off.
    """
    for mod in _wrappers(model):
        if enabled is not None:
            mod.enabled = bool(enabled)
        if dropout is False:
            mod.dropout_on = False
        if dropout_key is not None and mod.dropout > 0:
            # A new variable rather than set_value: the old one may belong to an outer trace (jit
            # around grad), which NNX rightly refuses to mutate from inside.
            mod.dropout_key = LoRADropoutKey(_layer_keys(dropout_key, mod.module_id, mod.lead),
                                             axes=mod.dropout_key.get_metadata().get("axes"))
            mod.dropout_on = True
    return model


def _parent(model: Transformer, name: str):
    return model.layers.self_attn if name in ATTN_TARGETS else model.layers.mlp


def apply_lora(model: Transformer, cfg: LoRAConfig, *, seed: int = 0) -> Transformer:
    """Wraps the targeted projections of `model` in place (and returns it)."""
    rngs = nnx.Rngs(seed)
    for i, name in enumerate(t for t in ALL_TARGETS if t in cfg.targets):
        parent = _parent(model, name)
        mod = getattr(parent, name)
        if isinstance(mod, LoRALinear):
            raise ValueError(f"LoRA already applied to {name}")
        setattr(parent, name, LoRALinear(mod, cfg, module_id=i, rngs=rngs))
    return model


def lora_modules(model: Transformer) -> list[tuple[str, LoRALinear]]:
    """(projection name, wrapper) for every LoRA-wrapped projection; each wrapper spans all layers."""
    out = []
    for name in ALL_TARGETS:
        mod = getattr(_parent(model, name), name)
        if isinstance(mod, LoRALinear):
            out.append((name, mod))
    return out


def merge_lora(model: Transformer) -> dict[str, LoRALinear]:
    """Folds the adapters into the base kernels and removes the wrappers (in place). Returns the
    removed wrappers ({name: module}) for `unmerge_lora`."""
    removed = {}
    for name, mod in lora_modules(model):
        k = mod.base.kernel
        k.set_value((k.get_value().astype(jnp.float32) + mod.delta_kernel()).astype(k.get_value().dtype))
        setattr(_parent(model, name), name, mod.base)
        removed[name] = mod
    return removed


def unmerge_lora(model: Transformer, adapters: dict[str, LoRALinear]) -> Transformer:
    """Inverse of merge_lora given the removed wrappers ({name: module})."""
    for name, mod in adapters.items():
        parent = _parent(model, name)
        base = getattr(parent, name)
        base.kernel.set_value((base.kernel.get_value().astype(jnp.float32) - mod.delta_kernel())
                              .astype(base.kernel.get_value().dtype))
        mod.base = base
        setattr(parent, name, mod)
    return model


def lora_param_count(model: nnx.Module) -> int:
    return sum(math.prod(x.shape) for x in jax.tree.leaves(nnx.state(model, nnx.LoRAParam)))
