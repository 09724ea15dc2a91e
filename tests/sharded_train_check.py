"""Run in a subprocess with 8 forced CPU devices (see test_sharding.py): one GRPO update on a 2x4 mesh vs one
device. Prints the max |diff| of the updated LoRA parameters and the loss as JSON."""

import json
import os
import sys

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax
import numpy as np

from rubric_jax import load_model
from rubric_jax.models.lora import LoRAConfig, apply_lora, lora_modules
from rubric_jax.models.sharding import make_mesh, shard_model, use_mesh
from rubric_jax.rl.losses import LossConfig
from rubric_jax.rl.policy import Policy, PolicyConfig, RolloutBatch, make_optimizer


def batch():
    rng = np.random.RandomState(0)
    b, tp, tc = 8, 6, 10
    tokens = rng.randint(0, 151936, (b, tp + tc)).astype(np.int32)
    mask = np.ones((b, tp + tc), bool)
    mask[1, :3] = False  # left padding
    mask[2, tp + 6:] = False  # an early end
    return RolloutBatch(tokens, mask, tp, mask[:, tp:], rng.randn(b).astype(np.float32))


def update(model, mesh=None):
    apply_lora(model, LoRAConfig(rank=4, alpha=8.0), seed=3)
    for i, (_, _, m) in enumerate(lora_modules(model)):
        m.lora_b.set_value(jax.random.normal(jax.random.key(i), m.lora_b.get_value().shape) * 0.01)
    if mesh is not None:
        shard_model(model, mesh)
    policy = Policy(model, make_optimizer(1e-3, warmup_steps=0, total_steps=10),
                    LossConfig(aggregation="token_mean", kl_coef=0.1), PolicyConfig(micro_batch_size=4,
                                                                                      num_iterations=2))
    metrics = policy.update(batch(), jax.random.key(0))
    return [np.asarray(x) for x in jax.tree.leaves(policy.lora)], metrics, policy


def main(ckpt):
    assert len(jax.devices()) == 8
    single, m1, _ = update(load_model(ckpt))
    mesh = make_mesh({"fsdp": 2, "tensor": 4})
    with use_mesh(mesh):
        sharded, m2, policy = update(load_model(ckpt, mesh=mesh), mesh)
    spec = str(jax.tree.leaves(policy.base)[3].sharding.spec)
    print(json.dumps({"max_diff": max(float(np.abs(a - b).max()) for a, b in zip(single, sharded)),
                      "loss": [m1["loss"], m2["loss"]], "kl": [m1["kl"], m2["kl"]],
                      "moved": max(float(np.abs(a).max()) for a in single), "spec": spec}))


if __name__ == "__main__":
    main(sys.argv[1])
