"""Run in a subprocess with 8 forced CPU devices (see test_sharding.py): one GRPO update on a 2x4 mesh vs one
device. Prints as JSON the max |diff| of the updated LoRA parameters, how far the update moved them (lora_b
starts at zero, as in training), the loss, and where the sharded run placed every parameter."""

import json
import os
import sys

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax
import numpy as np
from flax import nnx

from rubric_jax import load_model
from rubric_jax.models.lora import LoRAConfig, apply_lora
from rubric_jax.models.sharding import make_mesh, shard_model, use_mesh
from rubric_jax.rl.losses import LossConfig
from rubric_jax.rl.policy import Policy, PolicyConfig, RolloutBatch, make_optimizer
from sharding_placement import placement


def batch():
    rng = np.random.RandomState(0)
    b, tp, tc = 8, 6, 10
    tokens = rng.randint(0, 151936, (b, tp + tc)).astype(np.int32)
    mask = np.ones((b, tp + tc), bool)
    mask[1, :3] = False  # left padding
    mask[2, tp + 6:] = False  # an early end
    return RolloutBatch(tokens, mask, tp, mask[:, tp:], rng.randn(b).astype(np.float32))


def update(model, mesh=None):
    apply_lora(model, LoRAConfig(rank=4, alpha=8.0), seed=3)  # lora_b = 0: only the update can move it
    if mesh is not None:
        shard_model(model, mesh)
    policy = Policy(model, make_optimizer(1e-3, warmup_steps=0, total_steps=10),
                    LossConfig(aggregation="token_mean", kl_coef=0.1), PolicyConfig(micro_batch_size=4,
                                                                                      num_iterations=2))
    before = _lora_values(policy)
    metrics = policy.update(batch(), jax.random.key(0))  # two iterations: lora_b moves, then lora_a too
    return before, _lora_values(policy), metrics, policy


def _lora_values(policy):
    """{"path/lora_a": array} for every adapter parameter (layout-agnostic: stacked or per layer)."""
    return {"/".join(map(str, p)): np.asarray(v.get_value()) for p, v in nnx.to_flat_state(policy.trainable)}


def _max_abs(arrays):
    return max(float(np.abs(a).max()) for a in arrays)


def result(ckpt):
    assert len(jax.devices()) == 8
    init1, single, m1, _ = update(load_model(ckpt))
    mesh = make_mesh({"fsdp": 2, "tensor": 4})
    with use_mesh(mesh):
        init2, sharded, m2, policy = update(load_model(ckpt, mesh=mesh), mesh)
    assert sorted(single) == sorted(sharded) and single
    a_keys = [k for k in single if k.endswith("lora_a")]
    b_keys = [k for k in single if k.endswith("lora_b")]
    moved = lambda ks, after, before: _max_abs([after[k] - before[k] for k in ks])
    return {
        "num_lora": len(single), "num_lora_a": len(a_keys), "num_lora_b": len(b_keys),
        "init_diff": _max_abs([init1[k] - init2[k] for k in single]),  # both runs start from the same adapters
        "lora_b_init": _max_abs([init1[k] for k in b_keys]),
        # how far the step moved each kind of adapter, single device and mesh
        "moved_a": [moved(a_keys, single, init1), moved(a_keys, sharded, init2)],
        "moved_b": [moved(b_keys, single, init1), moved(b_keys, sharded, init2)],
        # the parameters after the step: mesh vs single device
        "max_diff": _max_abs([single[k] - sharded[k] for k in single]),
        "loss": [m1["loss"], m2["loss"]], "kl": [m1["kl"], m2["kl"]],
        "placement": placement(nnx.state(policy.model()), mesh)}


if __name__ == "__main__":
    print(json.dumps(result(sys.argv[1])))
