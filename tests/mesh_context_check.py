"""Run in a subprocess with 8 forced CPU devices (see test_forward.py): one jitted forward called outside
a mesh, inside one, and outside again; prints the output shardings as JSON."""

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


def result(ckpt):
    tokens = jnp.asarray(np.random.RandomState(0).randint(0, 151936, (4, 16)))
    single = load_model(ckpt)
    graphdef, state = nnx.split(single)

    @jax.jit
    def fwd(state, tokens):
        return nnx.merge(graphdef, state)(tokens)[0]

    before = fwd(state, tokens)
    mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
    _, sharded_state = nnx.split(load_model(ckpt, mesh=mesh))
    with use_mesh(mesh):
        inside = fwd(sharded_state, tokens)
    after = fwd(state, tokens)
    return {
        "outside_before": type(before.sharding).__name__,
        "inside": type(inside.sharding).__name__,
        "inside_spec": str(inside.sharding.spec),
        "outside_after": type(after.sharding).__name__,
        "max_diff": float(max(np.abs(np.asarray(inside) - np.asarray(before)).max(),
                              np.abs(np.asarray(after) - np.asarray(before)).max())),
    }


if __name__ == "__main__":
    print(json.dumps(result(sys.argv[1])))
