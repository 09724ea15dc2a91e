"""Run in the 8-device subprocess (tests/mesh_checks.py): the sharding block of docs/scaling.md, as written,
twice in one process on the tiny checkpoint; reports where each run put the weights."""

import os

import jax
from flax import nnx

import rubric_jax


def result(ckpt):
    from doc_blocks import python_block  # this directory is on the path: the scripts run from it

    block = python_block("mesh = make_mesh(")
    runs = []
    for _ in range(2):
        ns = {"rubric_jax": rubric_jax, "path": ckpt}
        exec(block, ns)  # noqa: S102 - the documentation's own example
        leaves = jax.tree.leaves(nnx.state(ns["model"]))
        runs.append({"kinds": sorted({type(a.sharding).__name__ for a in leaves}),
                     "mesh": sorted({str(dict(a.sharding.mesh.shape)) for a in leaves}),
                     "devices": max(len(a.sharding.device_set) for a in leaves),
                     "sharded": sum(len(a.sharding.device_set) > 1 and not a.sharding.is_fully_replicated
                                    for a in leaves), "leaves": len(leaves)})
    return {"runs": runs, "device_count": jax.device_count(), "cwd": os.getcwd()}
