"""Checkpointer: round trip, keep-last-N, resume, crash safety, clear errors."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rubric_jax.rl.checkpoint import Checkpointer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _train_state(seed=0, step=7):
    k1, k2 = jax.random.split(jax.random.key(seed))
    lora = {"layers": {"0": {"q": {"lora_a": jax.random.normal(k1, (8, 4)),
                                   "lora_b": jax.random.normal(k2, (4, 8)).astype(jnp.bfloat16)}}}}
    tx = optax.adamw(1e-3)
    opt_state = tx.init(lora)
    # one real update so mu/nu/count are non-trivial
    grads = jax.tree.map(lambda x: jnp.ones_like(x) * 0.5, lora)
    _, opt_state = tx.update(grads, opt_state, lora)
    return {"lora": lora, "opt_state": opt_state, "rng": jax.random.key_data(jax.random.key(seed + 100)),
            "step": step}


def _assert_tree_equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert np.shape(x) == np.shape(y)
        if not isinstance(y, (int, float)):
            assert x.dtype == y.dtype
        np.testing.assert_array_equal(np.asarray(x, np.float32), np.asarray(y, np.float32))


@pytest.mark.slow
def test_round_trip_with_abstract_target(tmp_path):
    state = _train_state()
    meta = {"data": {"epoch": 1, "index": np.int64(42)}, "curriculum": {"active": 3}, "config": {"lr": 5e-6},
            "rubric_versions": [1, 2]}
    ck = Checkpointer(tmp_path)
    assert ck.latest_step() is None
    assert ck.save(7, state, meta)
    ck.wait()
    assert ck.latest_step() == 7
    abstract = jax.eval_shape(lambda: _train_state(seed=1))
    restored, rmeta = Checkpointer(tmp_path).restore(target_state=abstract)
    _assert_tree_equal(restored, state)  # (eval_shape made the int step an int32 ShapeDtypeStruct)
    assert isinstance(restored["opt_state"][0], optax.ScaleByAdamState)  # the target's structure, not dicts
    assert int(restored["opt_state"][0].count) == 1
    assert rmeta == {"data": {"epoch": 1, "index": 42}, "curriculum": {"active": 3}, "config": {"lr": 5e-6},
                     "rubric_versions": [1, 2]}
    # the restored key data continues the same random stream
    key = jax.random.wrap_key_data(restored["rng"])
    np.testing.assert_array_equal(jax.random.normal(key, (3,)), jax.random.normal(jax.random.key(100), (3,)))
    ck.close()


def test_restore_casts_to_target_dtype_and_wraps_typed_keys(tmp_path):
    ck = Checkpointer(tmp_path)
    ck.save(0, {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "key": jax.random.key(3)}, {})
    target = {"w": jax.ShapeDtypeStruct((2, 3), jnp.bfloat16), "key": jax.eval_shape(lambda: jax.random.key(0))}
    restored, meta = ck.restore(0, target_state=target)
    assert restored["w"].dtype == jnp.bfloat16 and meta == {}
    assert jax.dtypes.issubdtype(restored["key"].dtype, jax.dtypes.prng_key)
    np.testing.assert_array_equal(jax.random.key_data(restored["key"]), jax.random.key_data(jax.random.key(3)))
    # a concrete typed key as the target works too
    restored, _ = ck.restore(0, target_state={"w": np.zeros((2, 3), np.float32), "key": jax.random.key(9)})
    np.testing.assert_array_equal(jax.random.key_data(restored["key"]), jax.random.key_data(jax.random.key(3)))
    ck.close()


def test_restored_arrays_are_placed_as_the_target_was(tmp_path):
    """A fresh run's state is uncommitted (jax placed it): restored committed, every program it enters would
    lower differently and miss the persistent compilation cache (a resumed run recompiled everything)."""
    state = _train_state()
    ck = Checkpointer(tmp_path)
    ck.save(7, state, {})
    dev = jax.devices()[0]
    target = _train_state(seed=1) | {"pinned": jax.device_put(jnp.ones(3), dev), "key": jax.random.key(5)}
    ck.save(8, state | {"pinned": np.full(3, 2.0, np.float32), "key": jax.random.key(6)}, {})
    restored, _ = ck.restore(8, target_state=target)
    for name, leaf in jax.tree_util.tree_flatten_with_path(restored)[0]:
        if isinstance(leaf, jax.Array):
            # the pinned leaf stays committed to its device; everything else comes back uncommitted
            assert leaf.committed == (jax.tree_util.keystr(name) == "['pinned']"), jax.tree_util.keystr(name)
    assert restored["pinned"].devices() == {dev}
    _assert_tree_equal({k: restored[k] for k in state}, state)
    np.testing.assert_array_equal(restored["pinned"], np.full(3, 2.0))
    np.testing.assert_array_equal(jax.random.key_data(restored["key"]), jax.random.key_data(jax.random.key(6)))
    # and a program traced for the fresh state is the one the restored state reuses: one compile, not two
    f = jax.jit(lambda t: jax.tree.reduce(lambda a, b: a + jnp.sum(b.astype(jnp.float32)), t, 0.0))
    f(target["lora"]), f(restored["lora"])
    assert f._cache_size() == 1
    ck.close()


def test_keep_last_n_and_interval(tmp_path):
    ck = Checkpointer(tmp_path, max_to_keep=2, save_interval_steps=2)
    saved = [ck.save(s, {"x": np.full((2,), s, np.float32), "step": s}, {"s": s}) for s in range(7)]
    assert saved == [True, False, True, False, True, False, True]
    assert ck.save(7, {"x": np.full((2,), 7, np.float32), "step": 7}, {"s": 7}, force=True)
    ck.wait()
    assert ck.all_steps() == [6, 7]
    assert sorted(os.listdir(ck.directory)) == ["6", "7"]
    ck.close()


def test_resume_picks_latest(tmp_path):
    ck = Checkpointer(tmp_path, max_to_keep=3)
    for s in (1, 2, 3):
        ck.save(s, {"x": np.full((3,), s, np.float32), "step": s}, {"s": s})
    ck.close()
    ck2 = Checkpointer(tmp_path)  # a restarted process
    assert ck2.latest_step() == 3
    state, meta = ck2.restore(target_state={"x": jax.ShapeDtypeStruct((3,), jnp.float32), "step": 0})
    assert state["step"] == 3 and meta == {"s": 3}
    np.testing.assert_array_equal(state["x"], [3, 3, 3])
    state, meta = ck2.restore(2)
    assert state["step"] == 2 and meta == {"s": 2}
    ck2.close()


def test_async_save(tmp_path):
    ck = Checkpointer(tmp_path, async_save=True)
    ck.save(1, {"x": np.ones((4,), np.float32)}, {"a": 1})
    ck.wait()
    assert ck.latest_step() == 1
    state, meta = ck.restore()
    np.testing.assert_array_equal(state["x"], np.ones(4))
    ck.close()


def test_errors(tmp_path):
    ck = Checkpointer(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="empty"):
        ck.restore()
    ck.save(0, {"params": {"a": np.ones((2, 3), np.float32)}, "step": 0}, {})
    with pytest.raises(FileNotFoundError, match="step 5"):
        ck.restore(5)
    with pytest.raises(ValueError, match=r"params\.b"):
        ck.restore(target_state={"params": {"b": jax.ShapeDtypeStruct((2, 3), jnp.float32)}, "step": 0})
    with pytest.raises(ValueError, match=r"params\.a.*\(2, 3\).*\(3, 3\)"):
        ck.restore(target_state={"params": {"a": jax.ShapeDtypeStruct((3, 3), jnp.float32)}, "step": 0})
    with pytest.raises(TypeError, match=r"meta\.cfg\.fn"):
        ck.save(1, {"x": np.ones(1)}, {"cfg": {"fn": object()}})
    ck.close()


def test_stray_unfinalized_directory_is_ignored(tmp_path):
    """What a crash leaves behind: a step directory under its temporary name, without commit markers."""
    ck = Checkpointer(tmp_path)
    ck.save(1, {"x": np.ones((3,), np.float32), "step": 1}, {"s": 1})
    ck.wait()
    stray = os.path.join(ck.directory, "2.orbax-checkpoint-tmp")
    os.makedirs(os.path.join(stray, "state.orbax-checkpoint-tmp", "d"))
    with open(os.path.join(stray, "state.orbax-checkpoint-tmp", "d", "junk"), "wb") as f:
        f.write(b"\0" * 100)
    ck.close()
    ck2 = Checkpointer(tmp_path)
    assert ck2.latest_step() == 1
    state, meta = ck2.restore()
    assert state["step"] == 1 and meta == {"s": 1}
    # and training continues: step 2 can be saved over the debris. Opening the Checkpointer starts the cleanup in the
    # background and orbax's save waits for it (wait() does not), so the debris is checked for after a save.
    assert ck2.save(2, {"x": np.zeros((3,), np.float32), "step": 2}, {"s": 2})
    ck2.wait()
    assert ck2.all_steps() == [1, 2]
    assert sorted(os.listdir(ck2.directory)) == ["1", "2"]
    assert not [f for _, _, fs in os.walk(ck2.directory) for f in fs if f == "junk"]  # the stray files are gone
    ck2.close()


_CHILD = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    import orbax.checkpoint as ocp
    sys.path.insert(0, {repo!r})
    from rubric_jax.rl.checkpoint import Checkpointer
    wd = sys.argv[1]

    # The kill point: every item of step 2 has been written into its temporary directory, the commit (rename to
    # "2" + commit marker) has not happened. The hook reports where it stopped and blocks until the parent kills.
    real_finalize = ocp.CompositeCheckpointHandler.finalize
    block = False

    def finalize(self, directory):
        if block:
            with open(os.path.join(wd, "blocked.tmp"), "w") as f:
                f.write(str(directory))
            os.replace(os.path.join(wd, "blocked.tmp"), os.path.join(wd, "blocked_in_save"))
            time.sleep(600)
        return real_finalize(self, directory)

    ocp.CompositeCheckpointHandler.finalize = finalize
    big = np.random.default_rng(0).integers(0, 2**32, (256, 1024), dtype=np.uint32)  # 1 MiB, incompressible
    ck = Checkpointer(wd)
    ck.save(1, {{"w": np.arange(10, dtype=np.float32), "step": 1}}, {{"s": 1}})
    ck.wait()
    open(os.path.join(wd, "step1_done"), "w").close()
    block = True
    ck.save(2, {{"w": big, "step": 2}}, {{"s": 2}})
    ck.wait()
    open(os.path.join(wd, "step2_done"), "w").close()
""")


@pytest.mark.slow
def test_kill_during_save_keeps_previous_checkpoint(tmp_path):
    """SIGKILL lands deterministically inside the save of step 2 (a hook blocks it just before the commit)."""
    script = tmp_path / "child.py"
    script.write_text(_CHILD.format(repo=REPO))
    wd = tmp_path / "wd"
    wd.mkdir()
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.Popen([sys.executable, str(script), str(wd)], env=env)
    blocked = wd / "blocked_in_save"
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None and not blocked.exists():
            time.sleep(0.01)
        running = proc.poll() is None
        if running:
            proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert (wd / "step1_done").exists(), "child failed before its first save"
    assert blocked.exists(), "the save of step 2 never reached the kill point"
    assert running, "the child exited on its own instead of being killed mid-save"
    assert not (wd / "step2_done").exists()
    # The kill left step 2 half-done: a temporary directory holding its array data, no finalized "2".
    ckdir = wd / "checkpoints"
    tmp_dir = blocked.read_text()
    assert os.path.isdir(tmp_dir) and os.path.basename(tmp_dir) != "2"
    assert os.path.dirname(os.path.abspath(tmp_dir)) == str(ckdir)
    assert sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(tmp_dir) for f in fs) >= 2**20
    assert "2" not in os.listdir(ckdir)
    ck = Checkpointer(wd)
    assert ck.latest_step() == 1
    state, meta = ck.restore(target_state={"w": jax.ShapeDtypeStruct((10,), jnp.float32), "step": 0})
    assert state["step"] == 1 and meta == {"s": 1}
    np.testing.assert_array_equal(state["w"], np.arange(10))
    # The debris is cleaned up by the next Checkpointer (in the background; its first save waits for it).
    assert ck.save(3, {"w": np.zeros(10, np.float32), "step": 3}, {"s": 3})
    ck.wait()
    assert ck.all_steps() == [1, 3] and not os.path.exists(tmp_dir)
    ck.close()


def test_after_a_failed_save_only_the_abandoned_writes_callbacks_are_silenced(monkeypatch):
    """orbax abandons a failed save's TensorStore writes; when they complete, their done-callbacks call
    `call_soon_threadsafe` on orbax's closed event loop, and Python reports each RuntimeError through
    sys.unraisablehook: dozens of tracebacks around the one-line error. The hook a writing Checkpointer installs
    drops exactly those and passes every other report on."""
    import asyncio
    import gc

    from rubric_jax.rl import checkpoint_errors as ck

    seen = []

    def recorder(u):
        seen.append((u.exc_type, str(u.exc_value)))

    monkeypatch.setattr(sys, "unraisablehook", recorder)
    ck._silence_abandoned_writes()
    hook = sys.unraisablehook
    assert hook is not recorder
    loop = asyncio.new_event_loop()
    loop.close()

    class Callback:  # a __del__ raising is reported as unraisable, as TensorStore's callbacks are
        def __init__(self, fn):
            self.fn = fn

        def __del__(self):
            self.fn()

    Callback(lambda: loop.call_soon_threadsafe(print))
    gc.collect()
    assert seen == []  # the closed loop's callback: dropped

    def other():
        raise RuntimeError("Event loop is closed")  # the same words, not raised by asyncio: passed on

    Callback(other)
    Callback(lambda: 1 / 0)
    gc.collect()
    assert seen == [(RuntimeError, "Event loop is closed"), (ZeroDivisionError, "division by zero")]
    ck._silence_abandoned_writes()  # a second call does not stack a second hook
    assert sys.unraisablehook is hook


def test_the_os_error_is_read_from_tensorstores_message_whatever_failed():
    """TensorStore's own text (as raised under RLIMIT_FSIZE here) and a failure worded without its write prefix."""
    from rubric_jax.rl.checkpoint_errors import os_error

    seen = ('OUT_OF_RANGE: Error opening "zarr" driver: Error writing ".zarray" in OCDBT database at local file '
            '"/tmp/tsx/": Failed writing: "/tmp/tsx/d/0d54.__lock": Failed to write 194 bytes to file 3: File too '
            "large [os_error_code='27'] [tensorstore_spec='{}']")
    assert os_error(ValueError(seen)) == "[Errno 27] File too large"
    other = ('OUT_OF_RANGE: Error writing "opt_state/.zarray" in OCDBT database at local file "7.tmp/": Failed '
             "writing: \"7.tmp/d/ab\": Error syncing file: No space left on device [os_error_code=28]")
    assert os_error(ValueError(other)) == "[Errno 28] No space left on device"
    assert os_error(ValueError("OUT_OF_RANGE: something else")).startswith("ValueError: OUT_OF_RANGE")
