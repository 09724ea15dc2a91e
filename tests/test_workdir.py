"""rubric_jax.rl.workdir: a training workdir read back as its base model with the trained LoRA merged."""

import importlib.util
import json
import os

import numpy as np
import pytest

from rubric_jax.rl.workdir import (apply_trained_lora, base_model_name, is_workdir, latest_lora, load_trained,
                                   run_config)

XLA_OPTIMIZED = True  # the real SmolLM2 runs in it (conftest._xla_optimisation)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def trained_run(trained_workdir):
    """(workdir, config) of the session's shared run of the README's first command (conftest.trained_workdir:
    two steps of configs/rcrl.py:tiny on the embedded SmolLM2)."""
    spec = importlib.util.spec_from_file_location("cfg_rcrl_workdir", os.path.join(ROOT, "configs", "rcrl.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return trained_workdir.path, mod.get_config("tiny")


@pytest.mark.slow
def test_a_trained_workdir_loads_with_its_latest_lora_merged(trained_run):
    from flax import nnx

    from rubric_jax import load_model
    from rubric_jax.models.lora import lora_modules

    wd, c = trained_run
    assert is_workdir(wd)
    cfg = run_config(wd)
    assert base_model_name(cfg) == c.model == "smollm2-135m-instruct"
    assert cfg["lora"]["rank"] == c.lora.rank and cfg["lora"]["alpha"] == c.lora.alpha

    model, tok, step = load_trained(wd)
    assert step == c.steps == 2 and tok.eos_ids
    assert not lora_modules(model)  # merged: plain projections again
    assert not nnx.state(model, nnx.LoRAParam)

    lora, lstep = latest_lora(wd)
    assert lstep == 2
    lq = lora["layers"]["self_attn"]["q_proj"]
    assert set(lq) == {"lora_a", "lora_b"}  # arrays, no {"value": ...} wrappers
    a, b = np.asarray(lq["lora_a"]), np.asarray(lq["lora_b"])
    r = a.shape[-1]
    assert r == c.lora.rank
    # the merged kernel is the base's plus the checkpoint's A B alpha/r
    delta = (a.reshape(a.shape[0], -1, r) @ b.reshape(b.shape[0], r, -1)) * (c.lora.alpha / c.lora.rank)
    assert np.abs(delta).max() > 0  # two steps moved the adapters: the merge below is not a no-op
    base = load_model(c.model)
    got = np.asarray(model.layers.self_attn.q_proj.kernel.get_value()).reshape(delta.shape)
    want = np.asarray(base.layers.self_attn.q_proj.kernel.get_value()).reshape(delta.shape) + delta
    np.testing.assert_allclose(got, want, atol=1e-6)

    # an explicit step: the ones that exist load, another is a clear error
    assert latest_lora(wd, step=1)[1] == 1
    with pytest.raises(FileNotFoundError, match="step 7"):
        latest_lora(wd, step=7)


def test_base_model_name_defaults_to_the_trainers():
    from rubric_jax.rl.trainer import DEFAULT_MODEL

    assert base_model_name({"model": "/ckpt/Qwen3-4B"}) == "/ckpt/Qwen3-4B"
    assert base_model_name({"model": ""}) == DEFAULT_MODEL
    assert base_model_name({}) == DEFAULT_MODEL


def test_is_workdir(tmp_path):
    wd = tmp_path / "run"
    (wd / "checkpoints").mkdir(parents=True)
    assert is_workdir(wd) and is_workdir(str(wd))
    assert not is_workdir(tmp_path / "nothing")
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text("{}")
    assert not is_workdir(plain)
    hf = tmp_path / "hf"  # a Hugging Face checkpoint that happens to hold a checkpoints/ folder
    (hf / "checkpoints").mkdir(parents=True)
    (hf / "config.json").write_text("{}")
    (hf / "model.safetensors").write_bytes(b"weights")
    assert not is_workdir(hf)


def test_a_workdir_without_config_json_is_a_clear_error(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(FileNotFoundError, match="needs the run's config.json"):
        run_config(tmp_path)
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_trained(str(tmp_path))


@pytest.mark.parametrize("with_dir", [False, True])
def test_a_workdir_without_checkpoints_is_a_clear_error(tmp_path, with_dir):
    # the base model does not exist: the missing checkpoint must be reported before any weights load
    (tmp_path / "config.json").write_text(json.dumps({"model": "/no/such/model", "lora": {"rank": 4}}))
    if with_dir:
        (tmp_path / "checkpoints").mkdir()
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        latest_lora(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_trained(str(tmp_path))
    assert os.path.isdir(tmp_path / "checkpoints") == with_dir  # reading creates nothing


@pytest.mark.slow
def test_adapters_that_do_not_fit_the_config_are_a_clear_error(tiny_qwen3):
    import jax
    from flax import nnx

    from rubric_jax import load_model
    from rubric_jax.models.lora import LoRAConfig, apply_lora

    policy = apply_lora(load_model(tiny_qwen3[0]), LoRAConfig(rank=4, alpha=8.0, targets=("q_proj", "v_proj")))
    lora = nnx.to_pure_dict(nnx.state(policy, nnx.LoRAParam))
    lora = jax.tree.map(lambda x: x + 0.05, lora)
    # fitting: the merged kernel is base + A B alpha/r
    merged = apply_trained_lora(load_model(tiny_qwen3[0]), {"lora": {"rank": 4, "alpha": 8.0,
                                                                      "targets": ["q_proj", "v_proj"]}}, lora)
    q = lora["layers"]["self_attn"]["q_proj"]
    a, b = np.asarray(q["lora_a"]), np.asarray(q["lora_b"])
    r = a.shape[-1]
    delta = (a.reshape(a.shape[0], -1, r) @ b.reshape(b.shape[0], r, -1)) * 2.0
    base = np.asarray(load_model(tiny_qwen3[0]).layers.self_attn.q_proj.kernel.get_value()).reshape(delta.shape)
    np.testing.assert_allclose(np.asarray(merged.layers.self_attn.q_proj.kernel.get_value()).reshape(delta.shape),
                               base + delta, atol=1e-5)
    # another rank, or other targets: refused
    for lcfg in ({"rank": 8, "alpha": 8.0, "targets": ["q_proj", "v_proj"]},
                 {"rank": 4, "alpha": 8.0, "targets": ["q_proj", "v_proj", "up_proj"]}):
        with pytest.raises(ValueError, match="do not fit the run's config"):
            apply_trained_lora(load_model(tiny_qwen3[0]), {"lora": lcfg}, lora)
