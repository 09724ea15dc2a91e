"""Run in a subprocess with 8 forced CPU devices (see test_sharding.py); prints max |diff| as JSON."""

import json
import os
import sys

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rubric_jax import load_model
from rubric_jax.models.sharding import make_mesh, use_mesh
from sharding_placement import placement


def result(ckpt):
    assert len(jax.devices()) == 8
    rng = np.random.RandomState(0)
    tokens = jnp.asarray(rng.randint(0, 151936, (4, 24)))
    mask = np.ones((4, 24), bool)
    mask[1, :5] = False
    mask = jnp.asarray(mask)

    single = load_model(ckpt)
    ref, _ = single(tokens, mask_bt=mask)

    mesh = make_mesh({"fsdp": 2, "tensor": 4})
    model = load_model(ckpt, mesh=mesh)
    graphdef, state = nnx.split(model)
    specs = {"/".join(map(str, p)): str(v.get_value().sharding.spec) for p, v in nnx.to_flat_state(state)}

    @jax.jit
    def fwd(state, tokens, mask):
        return nnx.merge(graphdef, state)(tokens, mask_bt=mask)[0]

    with use_mesh(mesh):
        out = fwd(state, tokens, mask)
    return {
        "max_diff": float(np.abs(np.asarray(out) - np.asarray(ref))[np.asarray(mask)].max()),
        "out_spec": str(out.sharding.spec),
        "q_proj": specs["layers/self_attn/q_proj/kernel"],
        "embed": specs["embed_tokens/embedding"],
        "down": specs["layers/mlp/down_proj/kernel"],
        "devices": len(jax.devices()),
        "placement": placement(state, mesh),
    }


if __name__ == "__main__":
    print(json.dumps(result(sys.argv[1])))
