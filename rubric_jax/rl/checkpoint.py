"""Checkpoint / resume: an orbax CheckpointManager with two items per step.

Layout under `<workdir>/checkpoints/<step>/`:
  state/   an arbitrary pytree of arrays and scalars (orbax StandardSave). The trainer stores
           {"lora": nnx.to_pure_dict(lora_state), "opt_state": optax state, "rng": jax.random.key_data(key),
            "step": int}. Typed PRNG keys (dtype key<...>) are accepted anywhere in the tree: they are stored as
           their uint32 key data and re-wrapped on restore when the target leaf is a typed key (concrete or
           `jax.eval_shape`'d); without a target they come back as raw key data (wrap with
           `jax.random.wrap_key_data`). Callers that want to be explicit store `jax.random.key_data(key)` themselves.
  meta/    a JSON dict (JsonSave): data-iterator state, curriculum state, config snapshot, rubric versions.
           numpy scalars/arrays are converted to Python numbers/lists; anything else non-JSON raises TypeError
           naming the key, at save time (not later in a background thread).

Crash safety comes from orbax: each step is written into `<step>.orbax-checkpoint-tmp-*` and renamed to
`<step>` only once every item is complete (a `commit_success.txt` marks it), so a process killed mid-save leaves
at most a stray temporary directory. Steps are listed from finalized directories only, so `latest_step()` and
`restore()` keep returning the previous checkpoint; the stray directory is deleted when the next Checkpointer is
opened on the workdir (`cleanup_tmp_directories=True`). tests/test_checkpoint.py kills a saving subprocess to
check this.

Multi-host: every process must call `save`/`restore` (orbax coordinates; process 0 writes the metadata).
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional

import jax
import numpy as np
import orbax.checkpoint as ocp

__all__ = ["Checkpointer", "CHECKPOINT_SUBDIR"]

CHECKPOINT_SUBDIR = "checkpoints"
_STATE, _META = "state", "meta"


def _is_typed_key(x) -> bool:
    dtype = getattr(x, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _pure(tree):
    """An nnx.State (at the top) becomes a pure nested dict of its values."""
    try:
        from flax import nnx
        if isinstance(tree, nnx.State):
            return nnx.to_pure_dict(tree)
    except ImportError:  # pragma: no cover
        pass
    return tree


def _key_impl(x):
    """The PRNG implementation of a typed key array or of its ShapeDtypeStruct."""
    if isinstance(x, jax.Array):
        return jax.random.key_impl(x)
    return x.dtype._impl  # key<...> dtypes carry their impl; there is no public accessor for abstract keys


def _to_storable(tree):
    """Typed PRNG keys -> uint32 key data; nnx.State -> pure dict. Everything else unchanged."""
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_typed_key(x) else x, _pure(tree))


def _abstract_leaf(x):
    """A restore target leaf: typed key -> ShapeDtypeStruct of its key data; arrays -> ShapeDtypeStruct
    (keeping a jax.Array's sharding so it is restored in place); Python/numpy scalars stay as they are."""
    if _is_typed_key(x):
        return jax.eval_shape(jax.random.key_data, x)
    if isinstance(x, jax.ShapeDtypeStruct):
        return x
    if _uncommitted(x):
        # Read into host memory and put back uncommitted (see `_placed_like`): np.empty reserves no pages.
        return np.empty(x.shape, x.dtype)
    if isinstance(x, (jax.Array, np.ndarray)):
        return ocp.utils.to_shape_dtype_struct(x)
    return x


def _uncommitted(x) -> bool:
    return isinstance(x, jax.Array) and not x.committed


def _placed_like(target, x):
    """A restored leaf placed as its target leaf was. A fresh single-device run holds uncommitted arrays (jax
    chose their device); restored with an explicit device they would be committed, which changes every
    program they enter and misses the persistent compilation cache: a resumed run recompiled its sampler,
    judge and update. Uncommitted targets are therefore restored to host memory and put back uncommitted."""
    if _is_typed_key(target):
        data = jax.device_put(np.asarray(x)) if _uncommitted(target) else x
        return jax.random.wrap_key_data(data, impl=_key_impl(target))
    return jax.device_put(x) if _uncommitted(target) else x


def _key_str(k) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def _flat_names(tree) -> dict[str, Any]:
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {".".join(_key_str(k) for k in path): leaf for path, leaf in leaves}


def _jsonable(obj, where="meta"):
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"checkpoint {where}: key {k!r} is not a string")
            out[k] = _jsonable(v, f"{where}.{k}")
        return out
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, (np.ndarray, jax.Array)):
        return _jsonable(np.asarray(obj).tolist(), where)
    if isinstance(obj, np.generic):
        return obj.item()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"checkpoint {where}: value of type {type(obj).__name__} is not JSON-serialisable")


class Checkpointer:
    """Keeps the last `max_to_keep` checkpoints of (state pytree, meta dict) under `<workdir>/checkpoints`.

    `save_interval_steps`: `save` skips steps that are not a multiple of it unless `force=True`.
    `async_save`: orbax writes in a background thread; call `wait()` before reading the files or exiting
    (`close()` does it).
    """

    def __init__(self, workdir: str | os.PathLike, max_to_keep: Optional[int] = 3, save_interval_steps: int = 1,
                 async_save: bool = False):
        self.directory = os.path.abspath(os.path.join(os.fspath(workdir), CHECKPOINT_SUBDIR))
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep,
            save_interval_steps=save_interval_steps,
            enable_async_checkpointing=async_save,
            cleanup_tmp_directories=True,
            create=True,
        )
        # explicit handlers (not just item names) so a fresh process can read item metadata before any restore
        self._mgr = ocp.CheckpointManager(
            self.directory, options=options,
            item_handlers={_STATE: ocp.StandardCheckpointHandler(), _META: ocp.JsonCheckpointHandler()})

    # ---- queries -------------------------------------------------------------------------------------------------
    def all_steps(self) -> list[int]:
        return sorted(int(s) for s in self._mgr.all_steps())

    def latest_step(self) -> Optional[int]:
        steps = self.all_steps()
        return steps[-1] if steps else None

    # ---- save ----------------------------------------------------------------------------------------------------
    def save(self, step: int, state_pytree: Any, meta: Optional[dict] = None, force: bool = False) -> bool:
        """Saves `state_pytree` and `meta` as checkpoint `step`; returns whether a save happened (interval/force)."""
        meta = _jsonable(dict(meta or {}))
        state = _to_storable(state_pytree)
        return bool(self._mgr.save(
            int(step),
            args=ocp.args.Composite(**{_STATE: ocp.args.StandardSave(state), _META: ocp.args.JsonSave(meta)}),
            force=force,
        ))

    # ---- restore -------------------------------------------------------------------------------------------------
    def restore(self, step: Optional[int] = None, target_state: Any = None) -> tuple[Any, dict]:
        """Returns (state_pytree, meta) of `step` (default: the latest).

        `target_state`: a pytree with the structure to restore into, of concrete arrays or `jax.ShapeDtypeStruct`s
        (e.g. `jax.eval_shape(init_fn)`); leaves are restored with its dtypes (and shardings, when given; an uncommitted array's leaf comes back
        uncommitted, as a fresh run's would be). Without
        it the saved structure comes back (namedtuples as dicts/lists, typed keys as key data). A Python-int leaf
        in the target restores as an int; `jax.eval_shape` turns ints into int32 ShapeDtypeStructs, which restore
        as 0-d arrays.
        Raises FileNotFoundError naming the directory when there is no such checkpoint, and ValueError naming the
        keys when the target's structure or shapes differ from the checkpoint's.
        """
        self.wait()
        steps = self.all_steps()
        if not steps:
            raise FileNotFoundError(f"no checkpoint to restore in {self.directory}")
        if step is None:
            step = steps[-1]
        elif int(step) not in steps:
            raise FileNotFoundError(f"no checkpoint for step {step} in {self.directory} (have steps {steps})")
        step = int(step)

        if target_state is None:
            # Arrays come back on this process' first device, whatever mesh saved them (e.g. a multi-host
            # run's checkpoint read on a laptop): the saved shardings name devices that may not exist here.
            state_args = ocp.args.StandardRestore(self._local_target(step))
        else:
            target = _to_storable_target(target_state)
            self._check_target(step, target)
            state_args = ocp.args.StandardRestore(target)
        restored = self._mgr.restore(
            step, args=ocp.args.Composite(**{_STATE: state_args, _META: ocp.args.JsonRestore()}))
        state, meta = restored[_STATE], restored[_META]
        if target_state is not None:
            state = jax.tree.map(_placed_like, _pure(target_state), state)
        return state, dict(meta or {})

    def saved_keys(self, step: int) -> set[str] | None:
        """The top-level keys of the state saved at `step` (metadata only, no array read); None when the
        metadata cannot be read."""
        try:
            md = self._mgr.item_metadata(step)
            md = md[_STATE] if isinstance(md, Mapping) else getattr(md, _STATE)
            return set(getattr(md, "tree", md))
        except Exception:
            return None

    def _local_target(self, step: int):
        """The saved structure as single-device ShapeDtypeStructs (non-array leaves as saved); None when
        the metadata cannot be read (orbax then restores with the saved shardings)."""
        try:
            md = self._mgr.item_metadata(step)
            md = md[_STATE] if isinstance(md, Mapping) else getattr(md, _STATE)
            md = getattr(md, "tree", md)
        except Exception:
            return None
        if md is None:
            return None
        device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])

        def leaf(m):
            shape, dtype = getattr(m, "shape", None), getattr(m, "dtype", None)
            if shape is None or dtype is None:
                return m
            return jax.ShapeDtypeStruct(tuple(shape), dtype, sharding=device)

        is_md = lambda x: hasattr(x, "shape") and hasattr(x, "dtype")
        return jax.tree.map(leaf, md, is_leaf=is_md)

    def _check_target(self, step: int, target) -> None:
        try:
            md = self._mgr.item_metadata(step)
            md = md[_STATE] if isinstance(md, Mapping) else getattr(md, _STATE)
            md = getattr(md, "tree", md)
        except Exception:  # metadata unreadable: let orbax report what it finds
            return
        if md is None:
            return
        saved = {k: v for k, v in _flat_names(md).items() if v is not None}
        wanted = _flat_names(target)
        where = os.path.join(self.directory, str(step))
        missing = sorted(set(wanted) - set(saved))
        extra = sorted(set(saved) - set(wanted))
        if missing or extra:
            raise ValueError(
                f"checkpoint {where}: state structure differs from the restore target; "
                f"keys in the target but not the checkpoint: {missing[:20]}; "
                f"keys in the checkpoint but not the target: {extra[:20]}")
        bad = []
        for name, leaf in wanted.items():
            saved_shape = getattr(saved[name], "shape", None)
            want_shape = tuple(np.shape(leaf)) if not hasattr(leaf, "shape") else tuple(leaf.shape)
            if saved_shape is not None and tuple(saved_shape) != want_shape:
                bad.append(f"{name}: checkpoint {tuple(saved_shape)} vs target {want_shape}")
        if bad:
            raise ValueError(f"checkpoint {where}: shape mismatch for " + "; ".join(bad[:20]))

    # ---- lifecycle -----------------------------------------------------------------------------------------------
    def wait(self) -> None:
        """Blocks until an async save has been finalized."""
        self._mgr.wait_until_finished()

    def close(self) -> None:
        self._mgr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _to_storable_target(target_state):
    return jax.tree.map(_abstract_leaf, _pure(target_state))
