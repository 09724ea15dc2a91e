"""Device meshes and logical-axis sharding.

Every parameter carries logical axis names (`axes` metadata: "layers", "vocab", "embed", "heads", ...);
one rules table maps them to mesh axes ("data", "fsdp", "tensor"); a logical name missing from the table
is an error, not a silent replication. Activations are annotated with `constrain`, which reads JAX's own
mesh context (`with use_mesh(mesh):` is `jax.set_mesh`): outside a mesh it is a no-op, so the same model
code runs on one device and on a mesh, and since jit keys its cache on that context, a function traced
outside a mesh is traced again inside one (no stale shardings). A mesh axis that does not divide a
dimension is dropped for that array (replicated) rather than failing: tiny test models have 2 kv
heads, a mesh may have tensor=4.
"""

from __future__ import annotations

import contextlib
import math
from typing import Iterator, Mapping, Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

# logical axis -> mesh axis (or tuple of mesh axes, or None = replicated)
DEFAULT_RULES: tuple[tuple[str, str | tuple[str, ...] | None], ...] = (
    ("layers", None),  # stacked layer weights: every device holds all layers of its shard (scanned)
    ("batch", ("data", "fsdp")),
    ("seq", None),
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("head_dim", None),
    ("mlp", "tensor"),
    ("lora_rank", None),
)

def make_mesh(shape: Mapping[str, int] | Sequence[tuple[str, int]], devices=None) -> Mesh:
    """Mesh with named axes, e.g. {"data": 2, "tensor": 4}; a -1 size takes the remaining devices."""
    items = list(shape.items()) if isinstance(shape, Mapping) else list(shape)
    devices = list(devices if devices is not None else jax.devices())
    known = math.prod(s for _, s in items if s != -1)
    sizes = [len(devices) // known if s == -1 else s for _, s in items]
    if math.prod(sizes) != len(devices):
        raise ValueError(f"mesh {dict(zip([n for n, _ in items], sizes))} needs {math.prod(sizes)} devices, "
                         f"have {len(devices)}")
    return Mesh(np.asarray(devices).reshape(sizes), tuple(n for n, _ in items))


def logical_to_spec(axes: Sequence[str | None], shape: Sequence[int] | None, mesh: Mesh,
                    rules=DEFAULT_RULES) -> PartitionSpec:
    """PartitionSpec for an array with these logical axes; mesh axes used at most once."""
    table = dict(rules)
    used: set[str] = set()
    spec = []
    for i, name in enumerate(axes):
        if name is not None and name not in table:
            raise ValueError(f"logical axis {name!r} has no sharding rule (known: {sorted(table)})")
        target = table.get(name) if name is not None else None
        targets = (target,) if isinstance(target, str) else tuple(target or ())
        kept = []
        for m in targets:
            if m not in mesh.shape or m in used or mesh.shape[m] == 1:
                continue
            size = math.prod(mesh.shape[a] for a in kept) * mesh.shape[m]
            if shape is not None and shape[i] % size:
                continue
            kept.append(m)
        used.update(kept)
        spec.append(tuple(kept) if len(kept) > 1 else (kept[0] if kept else None))
    return PartitionSpec(*spec)


@contextlib.contextmanager
def use_mesh(mesh: Mesh) -> Iterator[Mesh]:
    """Makes `mesh` JAX's current mesh: `constrain` annotations inside jit then shard for it."""
    with jax.set_mesh(mesh):
        yield mesh


def constrain(x: jax.Array, axes: Sequence[str | None], rules=DEFAULT_RULES) -> jax.Array:
    """Sharding constraint from logical axes under the current mesh (read at trace time from JAX's
    context, which is part of jit's cache key); the identity outside a mesh."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return x
    spec = logical_to_spec(axes, x.shape, mesh, rules)
    return jax.lax.with_sharding_constraint(x, spec)


def state_shardings(state: nnx.State, mesh: Mesh, rules=DEFAULT_RULES):
    """NamedSharding for every variable of an nnx.State, from its `axes` metadata (else replicated)."""

    def one(var):
        axes = getattr(var, "axes", None)
        shape = getattr(var.get_value(), "shape", ())
        if axes is None or len(axes) != len(shape):
            return NamedSharding(mesh, PartitionSpec())
        return NamedSharding(mesh, logical_to_spec(axes, shape, mesh, rules))

    return jax.tree.map(one, state, is_leaf=lambda v: isinstance(v, nnx.Variable))


def shard_model(model: nnx.Module, mesh: Mesh, rules=DEFAULT_RULES) -> nnx.Module:
    """Places the model's variables on the mesh by their logical axes (in place; returns the model).

    Variables already placed so are left alone. On a mesh spanning several processes, a variable held
    by this process alone (e.g. an adapter just initialised, identically on every process) is placed
    from its host value: JAX cannot move one process' device buffer onto other processes' devices.
    """
    state = nnx.state(model)
    shardings = state_shardings(state, mesh, rules)
    values = jax.tree.map(lambda v: v.get_value(), state, is_leaf=lambda v: isinstance(v, nnx.Variable))
    targets = jax.tree.map(lambda s: s, shardings, is_leaf=lambda v: isinstance(v, nnx.Variable))

    def place(x, target):
        if isinstance(x, jax.Array) and x.sharding.is_equivalent_to(target, x.ndim):
            return x
        if isinstance(x, jax.Array) and x.is_fully_addressable and not target.is_fully_addressable:
            if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):  # typed keys travel as their key data
                data = jax.device_put(np.asarray(jax.random.key_data(x)), target)
                return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
            x = np.asarray(x)
        return jax.device_put(x, target)

    placed = jax.tree.map(place, values, targets)
    nnx.update(model, placed)
    return model
