"""Checkpoint / resume: an orbax CheckpointManager with two items per step.

Layout under `<workdir>/checkpoints/<step>/`:
  state/   an arbitrary pytree of arrays and scalars (orbax StandardSave). The trainer stores
           {"lora": the LoRA parameters as a pure dict (or "params": every weight, finetune="full"), "opt_state":
           the optax state}: no key, since every key derives from (config.seed, step). Typed PRNG keys (dtype key<...>) are accepted anywhere in the tree: they are stored as
           their uint32 key data and re-wrapped on restore when the target leaf is a typed key (concrete or
           `jax.eval_shape`'d); without a target they come back as raw key data (wrap with
           `jax.random.wrap_key_data`). Callers that want to be explicit store `jax.random.key_data(key)` themselves.
  meta/    a JSON dict (JsonSave): the step, the data-iterator state and each feature's own keys (the trainer's
           `_meta`: the reward method's state, the judge's identity, the run's shape settings).
           numpy scalars/arrays are converted to Python numbers/lists; anything else non-JSON raises TypeError
           naming the key, at save time (not later in a background thread).

Crash safety comes from orbax: each step is written into `<step>.orbax-checkpoint-tmp-*` and renamed to
`<step>` only once every item is complete (a `commit_success.txt` marks it), so a process killed mid-save leaves
at most a stray temporary directory. Steps are listed from finalized directories only, so `latest_step()` and
`restore()` keep returning the previous checkpoint; the stray directory is deleted when the next Checkpointer is
opened on the workdir (`cleanup_tmp_directories=True`; not by a `read_only` one). tests/test_checkpoint.py kills a
saving subprocess to check this.

Damage after the commit (a full disk, an interrupted copy of the workdir) is another matter: orbax lists such a
step and fails deep inside TensorStore when it reads it. `latest_step()` therefore checks the newest steps before
naming one (`problem`: every commit marker present, every JSON file parses, and every array value of the OCDBT
store has its last byte on disk; a few milliseconds, no array decoded), and a step that fails is set aside, renamed
`<step>.damaged-<n>` (never deleted; orbax's listing ignores the name), with one warning line naming the step and
the reason; the newest intact step is used instead. With every step set aside, `DamagedCheckpointError` names the
folder and the ways out. tests/test_checkpoint_damage.py damages each part of a trained run's checkpoint.

Multi-host: every process must call `save`/`restore` (orbax coordinates; process 0 writes the metadata).
"""
from __future__ import annotations

import glob
import json
import logging
import os
import re
from typing import Any, Mapping, Optional

import jax
import numpy as np
import orbax.checkpoint as ocp

from rubric_jax.errors import UserError
from rubric_jax.rl.checkpoint_errors import SaveFailedError, cause_chain, os_error, quiet_failed_saves, short

__all__ = ["Checkpointer", "CHECKPOINT_SUBDIR", "DamagedCheckpointError", "SaveFailedError"]

log = logging.getLogger(__name__)

CHECKPOINT_SUBDIR = "checkpoints"
_STATE, _META = "state", "meta"
_COMMIT = "commit_success.txt"  # orbax's commit marker: written last, into the step folder and each item's
_DAMAGED = ".damaged-"  # <step>.damaged-<n>: a set-aside step (no "_<digits>" ending, which orbax would list)
# JSON files of a step as this orbax writes them, relative to the step folder; array_metadatas/* are added.
_JSON_FILES = ("_CHECKPOINT_METADATA", f"{_META}/metadata", f"{_STATE}/_METADATA", f"{_STATE}/_sharding")
# TensorStore reports a file that is cut short, missing or garbled with these status codes; other failures
# (out of memory, a sharding the devices cannot hold) say nothing about the files and are not damage.
_DAMAGE_STATUS = re.compile(r"^(DATA_LOSS|OUT_OF_RANGE|NOT_FOUND):|Error (reading|decoding)|Invalid JSON")


class DamagedCheckpointError(FileNotFoundError, UserError):
    """The checkpoint asked for cannot be read, or no intact one is left; what was damaged has been set aside.
    A FileNotFoundError, as for an empty workdir, so callers that report a missing checkpoint report this too;
    a UserError, so the entry points print its message as one line (the way out is the user's choice)."""


def _is_damage(e: BaseException) -> bool:
    return any(isinstance(x, (json.JSONDecodeError, FileNotFoundError)) or _DAMAGE_STATUS.search(str(x))
               for x in cause_chain(e))


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
                 async_save: bool = False, read_only: bool = False):
        self.directory = os.path.abspath(os.path.join(os.fspath(workdir), CHECKPOINT_SUBDIR))
        # read_only (readers: serve, evals): another process may be training in this workdir, and the stray
        # directory cleanup would delete the save it has in flight. Damaged steps are still set aside.
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep,
            save_interval_steps=save_interval_steps,
            enable_async_checkpointing=async_save,
            cleanup_tmp_directories=not read_only,
            create=not read_only,
            # The steps' commit times are not needed (steps are kept by number), and reading them here would
            # log orbax's own error for a damaged step before `latest_step` sets it aside with one line.
            lightweight_initialize=True,
        )
        # explicit handlers (not just item names) so a fresh process can read item metadata before any restore
        self._mgr = ocp.CheckpointManager(
            self.directory, options=options,
            item_handlers={_STATE: ocp.StandardCheckpointHandler(), _META: ocp.JsonCheckpointHandler()})
        self._intact: set[int] = set()  # steps `problem` passed (a finalized step's files do not change)
        self._saving: Optional[int] = None  # the step of the last save, until it is known to have finished
        if not read_only:
            quiet_failed_saves()

    # ---- queries -------------------------------------------------------------------------------------------------
    def all_steps(self) -> list[int]:
        return sorted(int(s) for s in self._mgr.all_steps())

    def latest_step(self) -> Optional[int]:
        """The newest intact step (None when there is no checkpoint). Newer steps that `problem` finds damaged
        are set aside (renamed `<step>.damaged-<n>`), one warning line each.

        Raises DamagedCheckpointError naming the folder when steps were set aside (now or by an earlier run)
        and none is left."""
        skipped = []
        found = None
        try:
            for step in reversed(self.all_steps()):
                why = self.problem(step)
                if why is None:
                    found = step
                    break
                aside = self._set_aside(step)
                if aside is not None:
                    skipped.append((step, why, aside))
        finally:
            for step, why, aside in skipped:
                log.warning("checkpoint step %d skipped, it cannot be read (%s); %s; %s", step, why, aside,
                            f"using step {found}" if found is not None else "no intact checkpoint left")
        if found is None and (skipped or self.set_aside_folders()):
            raise self._none_intact()
        return found

    def problem(self, step: int) -> Optional[str]:
        """Why checkpoint `step` cannot be restored, in a few words (None: intact as far as its files show).

        Checks without decoding any array: the commit markers (a step folder without one, while its items or
        other steps have theirs, is an interrupted save or copy), that every JSON file orbax wrote parses, and
        that each value of the array store (OCDBT) ends where its index says (a file cut short)."""
        step = int(step)
        if step in self._intact:
            return None
        path = os.path.join(self.directory, str(step))
        try:
            why = self._problem(path)
        except Exception as e:
            if not _is_damage(e):
                # The check itself failed (a permission, a TensorStore that reads differently): that says nothing
                # against the files, and setting a good step aside would be worse than the restore's own error.
                log.warning("checkpoint step %d could not be checked (%s); reading it as it is", step, short(e, path))
                return None
            why = short(e, path)
        if why is None:
            self._intact.add(step)
        return why

    def _problem(self, path: str) -> Optional[str]:
        missing = [item for item in (_STATE, _META) if not os.path.isdir(os.path.join(path, item))]
        if missing:
            return f"no {' or '.join(m + '/' for m in missing)} folder"
        item_marks = [os.path.exists(os.path.join(path, item, _COMMIT)) for item in (_STATE, _META)]
        if not os.path.exists(os.path.join(path, _COMMIT)):
            # An orbax from before the markers wrote none anywhere: only a step among marked ones lacks its own.
            others = glob.glob(os.path.join(glob.escape(self.directory), "*", _COMMIT))
            if any(item_marks) or others:
                return f"uncommitted: no {_COMMIT} (an interrupted save or copy)"
        files = [f for f in _JSON_FILES if os.path.exists(os.path.join(path, f))]
        files += sorted(os.path.relpath(f, path) for f in glob.glob(
            os.path.join(glob.escape(path), _STATE, "array_metadatas", "*")))
        if f"{_META}/metadata" not in files:
            return f"no {_META}/metadata"
        for rel in files:
            try:
                with open(os.path.join(path, rel), encoding="utf-8") as f:
                    json.load(f)
            except PermissionError:
                raise
            except (OSError, ValueError) as e:  # cut short, garbled, or an I/O error of the disk
                return f"{short(e, path)}, in {rel}"
        if os.path.exists(os.path.join(path, _STATE, "manifest.ocdbt")):
            return _ocdbt_problem(os.path.join(path, _STATE))
        return None

    def set_aside_folders(self) -> list[str]:
        """The steps set aside as damaged (`<step>.damaged-<n>` under the checkpoint folder), sorted."""
        return sorted(glob.glob(os.path.join(glob.escape(self.directory), f"*{_DAMAGED}*")))

    def _set_aside(self, step: int) -> Optional[str]:
        """Renames step `step`'s folder to `<step>.damaged-<n>`; returns what became of it, or None when it had
        already gone (another process of the run set it aside first, or orbax pruned it: nothing to report).
        Every process may try: the first rename wins and the others find the folder gone."""
        src = os.path.join(self.directory, str(step))
        self._intact.discard(step)
        try:
            if not os.path.isdir(src):
                return None
            n = 1
            while os.path.exists(f"{src}{_DAMAGED}{n}"):
                n += 1
            dst = f"{src}{_DAMAGED}{n}"
            try:
                os.rename(src, dst)
            except FileNotFoundError:
                return None
            except OSError as e:
                return f"left in place, as it cannot be renamed ({short(e)})"
            return f"set aside as {dst}"
        finally:
            self._mgr.reload()  # orbax caches its step list: a renamed step would be listed, pruned, or in the way

    def _none_intact(self) -> DamagedCheckpointError:
        names = ", ".join(os.path.basename(p) for p in self.set_aside_folders())
        return DamagedCheckpointError(
            f"no intact checkpoint in {self.directory} (set aside as damaged: {names or 'none'}): start fresh in "
            f"another workdir, or delete the set-aside folders to start afresh in this one, or restore one (a good "
            f"copy, named by its step number) to resume")

    def read_meta(self, step: int) -> dict:
        """The meta dict saved with `step`, without reading any array (to check a resume before restoring)."""
        restored = self._mgr.restore(int(step), args=ocp.args.Composite(**{_META: ocp.args.JsonRestore()}))
        return dict(restored[_META] or {})

    # ---- save ----------------------------------------------------------------------------------------------------
    def save(self, step: int, state_pytree: Any, meta: Optional[dict] = None, force: bool = False) -> bool:
        """Saves `state_pytree` and `meta` as checkpoint `step`; returns whether a save happened (interval/force)."""
        meta = _jsonable(dict(meta or {}))
        state = _to_storable(state_pytree)
        self.wait()  # orbax's save waits for the previous one anyway, and would raise its error as this step's
        try:
            done = bool(self._mgr.save(
                int(step),
                args=ocp.args.Composite(**{_STATE: ocp.args.StandardSave(state), _META: ocp.args.JsonSave(meta)}),
                force=force,
            ))
        except (OSError, ValueError) as e:  # TensorStore's I/O errors come as ValueError
            raise SaveFailedError(int(step), os_error(e, self.directory), self.directory) from e
        if done:
            self._saving = int(step)
        return done

    def check(self) -> None:
        """Raises SaveFailedError when the last (background) save has failed; returns at once otherwise, whether
        or not it has finished."""
        try:
            self._mgr.check_for_errors()
        except Exception as e:
            self._failed(e)

    def _failed(self, e: BaseException):
        step, self._saving = self._saving, None
        raise SaveFailedError(step if step is not None else -1, os_error(e, self.directory), self.directory) from e

    # ---- restore -------------------------------------------------------------------------------------------------
    def restore(self, step: Optional[int] = None, target_state: Any = None) -> tuple[Any, dict]:
        """Returns (state_pytree, meta) of `step` (default: the newest intact one; see `restore_newest`).

        `target_state`: a pytree with the structure to restore into, of concrete arrays or `jax.ShapeDtypeStruct`s
        (e.g. `jax.eval_shape(init_fn)`); leaves are restored with its dtypes (and shardings, when given; an
        uncommitted array's leaf comes back uncommitted, as a fresh run's would be). Without
        it the saved structure comes back (namedtuples as dicts/lists, typed keys as key data). A Python-int leaf
        in the target restores as an int; `jax.eval_shape` turns ints into int32 ShapeDtypeStructs, which restore
        as 0-d arrays.
        Raises FileNotFoundError naming the directory when there is no such checkpoint, DamagedCheckpointError
        (a FileNotFoundError) when `step` cannot be read (it is set aside, as `latest_step` does), and ValueError
        naming the keys when the target's structure or shapes differ from the checkpoint's.
        """
        if step is None:
            return self.restore_newest(target_state)[1:]
        self.wait()
        step = int(step)
        steps = self.all_steps()
        if not steps:
            raise FileNotFoundError(f"no checkpoint to restore in {self.directory}")
        if step not in steps:
            raise FileNotFoundError(f"no checkpoint for step {step} in {self.directory} (have steps {steps})")
        path = os.path.join(self.directory, str(step))
        why = self.problem(step)
        if why is None:
            try:
                return self._restore_step(step, target_state)
            except Exception as e:
                if not _is_damage(e):
                    raise
                why = short(e, path)
        aside = self._set_aside(step) or "gone"
        raise DamagedCheckpointError(f"checkpoint step {step} in {self.directory} cannot be read ({why}); {aside}; "
                                     f"restore without a step (or resume) to use the newest intact one")

    def restore_newest(self, target_state: Any = None) -> tuple[int, Any, dict]:
        """(step, state_pytree, meta) of the newest checkpoint that reads back: `latest_step`'s, or, should its
        arrays still fail as a damaged file does (bytes garbled in place, which `problem` does not read), the
        next older one, that step set aside with one warning line. Errors as `restore`'s."""
        self.wait()
        failed = set()
        while True:
            step = self.latest_step()
            if step is None:
                raise FileNotFoundError(f"no checkpoint to restore in {self.directory}")
            if step in failed:  # could not be renamed out of the way
                raise self._none_intact()
            try:
                return (step, *self._restore_step(step, target_state))
            except Exception as e:
                if not _is_damage(e):
                    raise
                failed.add(step)
                why = short(e, os.path.join(self.directory, str(step)))
                log.warning("checkpoint step %d skipped, it cannot be read (%s); %s; trying the newest one left",
                            step, why, self._set_aside(step) or "gone")

    def _restore_step(self, step: int, target_state: Any) -> tuple[Any, dict]:
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
        """Blocks until an async save has been finalized; SaveFailedError if it failed."""
        try:
            self._mgr.wait_until_finished()
        except Exception as e:
            self._failed(e)
        self._saving = None

    def close(self) -> None:
        """Waits for the last save and lets orbax's threads go. A save failure is not raised here (whoever
        calls close on the way out has had it from `check` or `wait`, or is already reporting another error)."""
        try:
            self._mgr.close()
        except Exception as e:  # the failure of a save nobody waited for: still say it once
            log.warning("while closing the checkpoints in %s: %s", self.directory, short(e, self.directory))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _to_storable_target(target_state):
    return jax.tree.map(_abstract_leaf, _pure(target_state))


def _ocdbt_problem(state_dir: str) -> Optional[str]:
    """Lists the OCDBT store (its manifest and index) and reads the last byte of every value: a data file cut
    short fails here (8 ms for the 88 values of the tiny run's checkpoint), where a restore would fail after
    allocating its target and print the whole TensorStore spec."""
    import tensorstore as ts

    kv = ts.KvStore.open({"driver": "ocdbt", "base": f"file://{os.path.abspath(state_dir)}/"}).result()
    keys = kv.list().result()
    reads = [(k, kv.read(k, byte_range=slice(-1, None))) for k in keys]
    for key, read in reads:
        try:
            read.result()
        except Exception as e:  # each key's own error, so the line can name the array
            if not _is_damage(e):
                raise
            return f"{short(e, state_dir)}, in {_STATE}/{key.decode(errors='replace')}"
    return None
