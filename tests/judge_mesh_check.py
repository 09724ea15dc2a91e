"""Run in a subprocess with 8 forced CPU devices (see test_judge_forward.py): the judge's pairwise verdicts on
a 2x4 (fsdp x tensor) mesh vs one device; prints the max |diff| as JSON."""

import json
import os
import sys

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax
import numpy as np
from flax import nnx

from rubric_jax import load_model, load_tokenizer
from rubric_jax.judge import Judge
from rubric_jax.models.sharding import make_mesh, use_mesh
from rubric_jax.rubrics import Criterion

PROMPT = "Describe a quiet harbour at dawn."
RESPONSES = ["Mist on the water, boats knocking softly.", "It is quiet.", "Gulls and a single bell."]
CRITERIA = [Criterion(id="imagery", name="Imagery", check="Concrete sensory details."),
            Criterion(id="calm", name="Calm", check="The text conveys stillness.")]


def result(ckpt):
    tok = load_tokenizer(ckpt)
    ref = Judge(load_model(ckpt), tok).pairwise(PROMPT, RESPONSES, CRITERIA).p_first
    mesh = make_mesh({"fsdp": 2, "tensor": 4})
    model = load_model(ckpt, mesh=mesh)
    sharded = sum(len(v.get_value().sharding.device_set) > 1 and not v.get_value().sharding.is_fully_replicated
                  for _, v in nnx.to_flat_state(nnx.state(model)))
    with use_mesh(mesh):
        out = Judge(model, tok).pairwise(PROMPT, RESPONSES, CRITERIA).p_first
    off = ~np.eye(len(RESPONSES), dtype=bool)
    return {"devices": len(jax.devices()), "sharded_params": int(sharded),
            "max_diff": float(np.abs(out[off] - ref[off]).max())}


if __name__ == "__main__":
    print(json.dumps(result(sys.argv[1])))
