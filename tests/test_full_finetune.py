"""finetune="full": every weight is trained, the KL reference stays the starting weights, checkpoints hold "params",
a full-parameter workdir loads as its trained weights, and a run cannot resume in the other mode."""

import dataclasses
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rubric_jax import PRESETS, init_model
from rubric_jax.models.lora import LoRAConfig, apply_lora
from rubric_jax.rl import trainer
from rubric_jax.rl.checkpoint import Checkpointer
from rubric_jax.rl.losses import LossConfig, finalize
from rubric_jax.rl.metrics import read_metrics
from rubric_jax.rl.policy import Policy, PolicyConfig, RolloutBatch, make_optimizer

from test_trainer import _tiny_run_config, kill_then_resume

CFG = PRESETS["tiny"].replace(vocab_size=64, eos_token_ids=(63,))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _model():
    model = init_model(CFG, seed=0)
    # Larger embeddings than the default init, so log-probs are far from uniform and gradients are not tiny.
    model.embed_tokens.embedding.set_value(model.embed_tokens.embedding.get_value() * 8)
    return model


def _policy(lr=1e-3):
    """A full-parameter policy. Every test's batches have 6 rows, taken 3 at a time: the tests share their compiled
    log-prob and gradient programs (two micro-batches also put gradient accumulation under test)."""
    opt = make_optimizer(lr, warmup_steps=0, total_steps=10, schedule="constant")
    return Policy(_model(), opt, LossConfig(aggregation="token_mean", kl_coef=0.1), PolicyConfig(micro_batch_size=3),
                  finetune="full")


def _batch(seed=0, b=6, tp=5, tc=8):
    """Random prompts and completions over the 64-token vocabulary, with left padding and an early end."""
    rng = np.random.RandomState(seed)
    tokens = rng.randint(0, CFG.vocab_size, (b, tp + tc)).astype(np.int32)
    mask = np.ones((b, tp + tc), bool)
    mask[1, :2] = False
    mask[2, tp + 5:] = False
    return RolloutBatch(tokens, mask, tp, mask[:, tp:], rng.randn(b).astype(np.float32))


def _flat(state):
    return {"/".join(map(str, p)): v.get_value() for p, v in nnx.to_flat_state(state)}


def _replaced(state, target, index, delta):
    """`state` with one entry of the array `target` (one of its leaves) moved by `delta`."""
    return jax.tree.map(lambda x: x.at[index].add(delta) if x is target else x, state)


def test_full_mode_trains_every_weight_and_refuses_adapters():
    opt = make_optimizer(1e-3, warmup_steps=0, total_steps=10)
    model = nnx.eval_shape(_model)
    policy = Policy(model, opt, LossConfig(), finetune="full")
    assert set(_flat(policy.trainable)) == set(_flat(nnx.state(model, nnx.Param))) != set()
    assert not jax.tree.leaves(policy.base)
    with pytest.raises(ValueError, match="without LoRA adapters"):
        Policy(nnx.eval_shape(lambda: apply_lora(_model(), LoRAConfig(rank=4))), opt, LossConfig(), finetune="full")
    with pytest.raises(ValueError, match="finetune must be one of"):
        Policy(model, opt, LossConfig(), finetune="partial")


@pytest.mark.slow  # ~30 s on 2 cores (compiles the gradient program)
def test_full_mode_refuses_bfloat16_weights():
    """Without a float32 master copy, small updates of bfloat16 weights round away: a clear error, not a run
    that silently does not learn (raised before any weight is read)."""
    cfg = _tiny_run_config("rare", "/nonexistent/model")
    cfg.finetune, cfg.dtype = "full", "bfloat16"
    with pytest.raises(ValueError, match="dtype=float32"):
        trainer.build(cfg)


@pytest.mark.slow
def test_gradient_of_a_weight_matches_central_differences():
    """d loss / d w for single entries of weights LoRA never touches (a norm scale, the embedding) and of an MLP
    kernel, against central differences of the loss the policy reports. The old log-probs are fixed and shifted
    from the current ones so the ratio term has a gradient; the KL term is on (k3 against the reference)."""
    policy = _policy()
    batch = _batch()
    logp = policy.logprobs(batch)
    shift = 0.05 * np.random.RandomState(1).randn(*logp.shape).astype(np.float32)
    batch = dataclasses.replace(batch, old_logp_bt=logp + shift, ref_logp_bt=logp - shift)
    key = jax.random.key(0)

    def loss(state):
        saved, policy.trainable = policy.trainable, state
        try:
            return float(finalize(policy.gradients(batch, key)[1])[0])
        finally:
            policy.trainable = saved

    grad_sum, sums, _ = policy.gradients(batch, key)
    grads = {k: np.asarray(v) / float(sums.den) for k, v in _flat(grad_sum).items()}
    params = _flat(policy.trainable)
    for name in ("layers/post_attention_layernorm/scale", "embed_tokens/embedding", "layers/mlp/down_proj/kernel"):
        g = grads[name]
        index = np.unravel_index(np.argmax(np.abs(g)), g.shape)  # the largest entry: well above rounding noise
        h = 1e-2  # f32 forward: large enough to rise above rounding, small enough that curvature does not show
        fd = (loss(_replaced(policy.trainable, params[name], index, h))
              - loss(_replaced(policy.trainable, params[name], index, -h))) / (2 * h)
        assert abs(g[index]) > 1e-3, (name, g[index])
        assert g[index] == pytest.approx(fd, rel=2e-3), name


@pytest.mark.slow
def test_reference_is_the_frozen_starting_weights():
    """Before any update the reference log-probs are the policy's (KL 0); after a large step the policy's move
    and the reference's still equal those of a separately built copy of the starting model."""
    policy = _policy(lr=5e-2)
    batch = _batch(seed=2)
    ref0 = policy.logprobs(batch, reference=True)
    np.testing.assert_array_equal(ref0, policy.logprobs(batch))
    m = policy.update(batch, jax.random.key(0))
    assert m["kl"] == pytest.approx(0.0, abs=1e-7)  # the first step's KL is against itself
    after = policy.logprobs(batch)
    assert np.abs(after - ref0).max() > 1e-2
    fresh = _policy()  # never updated: its own log-probs are the starting model's
    np.testing.assert_array_equal(policy.logprobs(batch, reference=True), fresh.logprobs(batch))
    # a second step sees the policy away from the reference: a real KL term
    assert policy.update(batch, jax.random.key(1))["kl"] > 1e-6


# ---------------------------------------------------------------------------------------------------------------
# Sharding: the trainer's own build on a 2x2 mesh of forced CPU devices, in a fresh process.

_SHARDED = r"""
import json, sys
import jax, numpy as np
from flax import nnx
from rubric_jax.rl import trainer
from rubric_jax.rl.policy import RolloutBatch
from test_trainer import _tiny_run_config

XLA_OPTIMIZED = True  # its updates touch every weight (conftest._xla_optimisation)

setup = trainer.build(_tiny_run_config("rcrl", sys.argv[1], finetune="full", mesh="fsdp:2,tensor:2"))
pol = setup.policy
base = jax.tree.leaves(nnx.state(setup.base, nnx.Param))
like_base = lambda tree: [x.sharding.is_equivalent_to(b.sharding, b.ndim) for x, b in zip(jax.tree.leaves(tree), base)]
before = [np.asarray(x) for x in jax.tree.leaves(pol.trainable)]
rng = np.random.RandomState(0)
tokens = rng.randint(0, 1000, (4, 12)).astype(np.int32)
mask = np.ones((4, 12), bool)
batch = RolloutBatch(tokens, mask, 4, mask[:, 4:], rng.randn(4).astype(np.float32))
placed = {"initial": like_base(pol.trainable), "initial_mu": like_base(pol.opt_state[1][0].mu)}
with setup.hosts.global_context():
    pol.update(batch, jax.random.key(0))
adam = pol.opt_state[1][0]
print(json.dumps({**placed, "trainable": like_base(pol.trainable), "mu": like_base(adam.mu), "nu": like_base(adam.nu),
                  "split": sum(any(a is not None for a in b.sharding.spec) for b in base),
                  "count": str(adam.count.sharding), "mesh_devices": adam.count.sharding.num_devices,
                  "moved": max(float(np.abs(np.asarray(a) - b).max())
                               for a, b in zip(jax.tree.leaves(pol.trainable), before))}))
"""


@pytest.mark.slow
def test_full_parameters_and_optimizer_state_are_placed_like_the_base(tiny_qwen3):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests"), env.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", _SHARDED, tiny_qwen3[0]], capture_output=True, text=True, env=env,
                          timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["split"] > 0  # the weights really are split over the mesh
    for what in ("initial", "initial_mu", "trainable", "mu", "nu"):  # before and after an update
        assert res[what] and all(res[what]), (what, res[what])
    assert res["mesh_devices"] == 4, res["count"]  # Adam's step counter: replicated over the mesh
    assert res["moved"] > 0


# ---------------------------------------------------------------------------------------------------------------
# The trainer and the workdir.

def _cfg(ckpt, steps=2, **over):
    # checkpoint.every=2: a kill inside step 1 must itself save the state after step 0 (the crash-save path)
    return _tiny_run_config("rcrl", ckpt, steps=steps, finetune="full", **{"checkpoint.every": 2, **over})


@pytest.fixture(scope="module")
def full_run(tiny_qwen3, tmp_path_factory):
    """(workdir, metrics) of an uninterrupted 2-step full-parameter run on the tiny Qwen3 (once for this file)."""
    wd = str(tmp_path_factory.mktemp("full_run") / "run")
    return wd, trainer.train(_cfg(tiny_qwen3[0]), wd)


def _restored(workdir):
    with Checkpointer(workdir) as ck:
        return ck.restore()


@pytest.mark.slow
def test_full_run_trains_non_lora_weights_and_resumes_exactly(full_run, tiny_qwen3, tmp_path, monkeypatch):
    from rubric_jax import load_model

    straight, _ = full_run
    state, meta = _restored(straight)
    assert set(state) == {"params", "opt_state"} and meta["finetune"] == "full" and meta["step"] == 2
    params = _flat_dict(state["params"])
    base = _flat(nnx.state(load_model(tiny_qwen3[0]), nnx.Param))
    assert set(params) == set(base)
    for name in ("layers/input_layernorm/scale", "norm/scale", "embed_tokens/embedding", "layers/mlp/up_proj/kernel"):
        assert np.abs(params[name] - np.asarray(base[name])).max() > 1e-6, name  # weights LoRA never trains

    resumed = str(tmp_path / "resumed")
    kill_then_resume(monkeypatch, lambda: trainer.train(_cfg(tiny_qwen3[0]), resumed), 1,
                     check=lambda: set(_restored(resumed)[0]) == {"params", "opt_state"}
                     and Checkpointer(resumed).latest_step() == 1)
    again, meta_b = _restored(resumed)
    assert meta_b["data"] == meta["data"] and meta_b["step"] == 2
    for name, x in _flat_dict(again["params"]).items():
        np.testing.assert_allclose(x, params[name], atol=1e-6, err_msg=name)
    ma, mb = read_metrics(straight), read_metrics(resumed)
    assert [m["step"] for m in mb] == [0, 1]
    for x, y in zip(ma, mb):
        for k in x:
            if not k.startswith("time/"):
                assert x[k] == pytest.approx(y[k], abs=1e-5), (x["step"], k)

    # The other mode on either kind of workdir: refused before anything trains, naming both modes.
    with pytest.raises(ValueError, match="finetune='full' and this run has finetune='lora'"):
        trainer.train(_tiny_run_config("rcrl", tiny_qwen3[0], steps=3), straight)
    lora_wd = str(tmp_path / "lora")
    with Checkpointer(lora_wd) as ck:  # what a LoRA run saves, in miniature (only its layout is read)
        ck.save(1, trainer._state_dict("lora", {"layers": {"a": jnp.zeros(2)}}, {"count": jnp.zeros(())}),
                {"step": 1}, force=True)
    with pytest.raises(ValueError, match="finetune='lora' and this run has finetune='full'"):
        trainer.train(_cfg(tiny_qwen3[0], steps=3), lora_wd)


def _flat_dict(tree, prefix=""):
    """{"a/b/c": array} of a restored nested dict (variables may come back as {"value": array})."""
    if isinstance(tree, dict):
        if set(tree) == {"value"} and not isinstance(tree["value"], dict):
            return {prefix: np.asarray(tree["value"])}
        out = {}
        for k, v in tree.items():
            out.update(_flat_dict(v, f"{prefix}/{k}" if prefix else str(k)))
        return out
    return {prefix: np.asarray(tree)}


@pytest.mark.slow
def test_a_full_parameter_workdir_loads_its_saved_parameters(full_run):
    from evals.models import LoadedMember, MemberSpec
    from rubric_jax.rl.workdir import latest_lora, latest_trained, load_trained

    wd, _ = full_run
    saved = _flat_dict(_restored(wd)[0]["params"])
    mode, params, step = latest_trained(wd)
    assert (mode, step) == ("full", 2)
    with pytest.raises(ValueError, match="full parameters"):
        latest_lora(wd)
    model, tok, step = load_trained(wd)
    assert step == 2 and tok.eos_ids
    loaded = _flat(nnx.state(model, nnx.Param))
    assert set(loaded) == set(saved)
    for name, x in saved.items():
        np.testing.assert_array_equal(np.asarray(loaded[name]), x, err_msg=name)
    # evals loads the same weights (python -m evals.run --models=name=<workdir>)
    member = LoadedMember(MemberSpec("workdir", wd))
    assert len(member.fingerprint) == 64
    for name, x in _flat(nnx.state(member.model, nnx.Param)).items():
        np.testing.assert_array_equal(np.asarray(x), saved[name], err_msg=name)
