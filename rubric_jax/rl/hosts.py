"""The processes of a run and the devices each one drives: one process per host (jax.distributed), one mesh.

A training step does two kinds of work (docs/architecture.md, "Many hosts"):

  local   sampling, judging and the bonuses. Each process works on its own contiguous slice of the step's
          prompts, on its own devices (`local_mesh`), with a view of the weights that lives there
          (`local`: the same device buffers, re-labelled, nothing copied). Judging packs work by text
          length, so processes compile and run different programs here; nothing in this phase waits for
          another process.
  global  the update. Every process contributes its rows to one batch that spans the mesh (`rows`) and
          runs the same program; XLA reduces the gradients across hosts.

Between the two, `gather` hands every process every other process' per-row results (rewards, lengths,
judge figures), so advantages, the update's completion width and every logged metric are computed from
the global batch, identically on every process. Anything that decides control flow is decided from
gathered values, so the processes agree without further messages.

This requires that every process own whole slices of the mesh's "data" axis: parameters are never
sharded over "data" (sharding.DEFAULT_RULES), so each process then holds a complete copy of the
weights over its own fsdp/tensor devices. With one process everything here is the identity.
"""

from __future__ import annotations

import contextlib
import pickle
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rubric_jax.models.sharding import logical_to_spec, use_mesh

__all__ = ["Hosts", "local_mesh_of", "merge_rows"]


def local_mesh_of(mesh: Mesh, process: int, count: int) -> Mesh:
    """The sub-mesh of `process`'s devices: the same axis names, the "data" axis divided by `count`.

    Raises ValueError unless the process owns a contiguous block of the data axis and every device of the
    other axes in that block (the layout `make_mesh` gives when "data" is the first axis and jax.devices()
    lists each process' devices together, which it does).
    """
    if count == 1:
        return mesh
    devs = mesh.devices
    if "data" not in mesh.axis_names or mesh.shape["data"] % count:
        raise ValueError(f"with {count} processes the mesh needs a 'data' axis whose size is a multiple of "
                         f"{count} (each process takes whole slices of it); got {dict(mesh.shape)}")
    ax = mesh.axis_names.index("data")
    mine = np.vectorize(lambda d: d.process_index == process, otypes=[bool])(devs)
    others = tuple(i for i in range(devs.ndim) if i != ax)
    rows = np.flatnonzero(mine.any(axis=others))
    want = mesh.shape["data"] // count
    contiguous = len(rows) == want and rows[-1] - rows[0] + 1 == want
    if not contiguous or not np.take(mine, rows, axis=ax).all():
        raise ValueError(f"process {process} does not own whole, contiguous slices of the mesh's 'data' axis "
                         f"{dict(mesh.shape)}: put 'data' first and give it a multiple of the process count")
    return Mesh(np.take(devs, rows, axis=ax), mesh.axis_names)


def merge_rows(parts: Sequence[Any]) -> Any:
    """Concatenates per-process results in process order: arrays along axis 0, lists end to end, dicts
    key by key; scalars and strings must agree (they are settings, not data)."""
    first = parts[0]
    if isinstance(first, dict):
        return {k: merge_rows([p[k] for p in parts]) for k in first}
    if isinstance(first, np.ndarray):
        return np.concatenate(parts, axis=0)
    if isinstance(first, list):
        return [x for p in parts for x in p]
    if any(p != first for p in parts[1:]):
        raise ValueError(f"processes disagree on a value they should share: {parts!r:.200}")
    return first


class Hosts:
    """This process' place in the run: `index` of `count`, the global `mesh` and its own `local_mesh`."""

    def __init__(self, mesh: Mesh | None, index: int | None = None, count: int | None = None):
        self.index = jax.process_index() if index is None else index
        self.count = jax.process_count() if count is None else count
        if self.count > 1 and mesh is None:
            raise ValueError("a multi-process run needs a device mesh (config.mesh, e.g. 'data:8')")
        self.mesh = mesh
        self.local_mesh = None if mesh is None else local_mesh_of(mesh, self.index, self.count)

    @property
    def multi(self) -> bool:
        return self.count > 1

    # ---- contexts ------------------------------------------------------------------------------
    def local_context(self):
        """Sharding annotations of the local phases refer to this process' devices only."""
        return contextlib.nullcontext() if self.local_mesh is None else use_mesh(self.local_mesh)

    def global_context(self):
        return contextlib.nullcontext() if self.mesh is None else use_mesh(self.mesh)

    # ---- arrays ----------------------------------------------------------------------------------
    def local(self, tree):
        """Global arrays (sharded over the mesh, replicated over "data") as arrays on this process'
        devices: the same buffers under the local mesh, so local programs never touch another host."""
        if not self.multi:
            return tree

        def one(x):
            if not isinstance(x, jax.Array) or x.is_fully_addressable:
                return x
            if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):  # typed keys: view their key data
                return jax.random.wrap_key_data(one(jax.random.key_data(x)), impl=jax.random.key_impl(x))
            spec = x.sharding.spec if isinstance(x.sharding, NamedSharding) else PartitionSpec()
            if any(a == "data" or (isinstance(a, tuple) and "data" in a) for a in spec):
                raise ValueError(f"an array of shape {x.shape} is sharded over 'data' ({spec}); weights must "
                                 "be replicated over it")
            return jax.make_array_from_single_device_arrays(
                x.shape, NamedSharding(self.local_mesh, spec), [s.data for s in x.addressable_shards])

        return jax.tree.map(one, tree)

    def on_mesh(self, tree):
        """Leaves not yet placed on the global mesh (e.g. optimizer counters made on one device), replicated
        over it from their host values; leaves already on the mesh are left alone. A checkpoint restored
        into the result comes back on the mesh too (orbax follows the target's shardings)."""
        if self.mesh is None:
            return tree
        replicated = NamedSharding(self.mesh, PartitionSpec())

        def one(x):
            if not isinstance(x, jax.Array) or getattr(x.sharding, "mesh", None) == self.mesh:
                return x
            return jax.device_put(np.asarray(x), replicated)

        return jax.tree.map(one, tree)

    def rows_sharding(self, global_rows: int) -> NamedSharding | None:
        """How a batch of `global_rows` rows is laid out for the update: over the mesh's batch axes."""
        if self.mesh is None:
            return None
        spec = logical_to_spec(("batch",), (global_rows,), self.mesh)
        if self.multi and not any(a == "data" or (isinstance(a, tuple) and "data" in a) for a in spec):
            raise ValueError(f"a batch of {global_rows} rows cannot be split over the mesh's 'data' axis "
                             f"{dict(self.mesh.shape)}: make loss.micro_batch_size a multiple of its size")
        return NamedSharding(self.mesh, spec)

    def rows(self, x: np.ndarray) -> jax.Array:
        """This process' rows of a batch -> the global batch array (process p's rows are block p)."""
        x = np.asarray(x)
        sharding = self.rows_sharding(x.shape[0] * self.count)
        if sharding is None:
            return jnp.asarray(x)
        return jax.make_array_from_process_local_data(sharding, x)

    def local_rows(self, x: jax.Array) -> np.ndarray:
        """The inverse of `rows` for a result with one row per input row: this process' block."""
        if not self.multi:
            return np.asarray(x)
        from jax.experimental import multihost_utils

        full = np.asarray(multihost_utils.process_allgather(x, tiled=True))
        n = full.shape[0] // self.count
        return full[self.index * n:(self.index + 1) * n]

    # ---- host values -----------------------------------------------------------------------------
    def gather(self, obj: Any) -> list[Any]:
        """Every process' `obj` (anything picklable), in process order, on every process."""
        if not self.multi:
            return [obj]
        from jax.experimental import multihost_utils

        data = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
        sizes = np.asarray(multihost_utils.process_allgather(np.asarray([data.size], np.int32))).reshape(-1)
        buf = np.zeros(int(sizes.max()), np.uint8)
        buf[:data.size] = data
        every = np.asarray(multihost_utils.process_allgather(buf)).reshape(self.count, -1)
        return [pickle.loads(every[i, :sizes[i]].tobytes()) for i in range(self.count)]

    def merged(self, obj: Any) -> Any:
        """`gather` then `merge_rows`: the global batch's version of a per-process result."""
        return merge_rows(self.gather(obj))

    def max(self, value: int) -> int:
        return int(max(self.gather(int(value))))

    def same(self, value: Any, what: str) -> Any:
        """Checks that every process computed the same `value` (e.g. a config-derived setting)."""
        values = self.gather(value)
        if any(v != values[0] for v in values[1:]):
            raise RuntimeError(f"processes disagree on {what}: {values!r:.300}")
        return values[0]
